"""The traffic room: open-loop request rates, SLOs and saturation (``labs/02_serving_real_traffic.ipynb``).

Modules (each listed as it lands):
"""
