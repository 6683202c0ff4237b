"""Check a Colab install plan against Colab's published GPU image, without Colab and without a GPU.

``check_plans([Path("requirements/colab.txt")])`` answers: which torch and vLLM pip would install
on Colab's image, the CUDA major of each (torch's from its build, vLLM's from the libcudart its
extensions link to), which of the image's packages change (Colab's kernel packages must not), and
whether every library vLLM's compiled extensions link to is provided after the install.
Needs PyPI; downloads no whole wheel.

Modules, in the order they are used:

- ``image``: the image's pip freeze, apt list and Python (``tests/data/colab-image`` by default).
- ``resolve``: pip's own resolver, run on stubs of the image's packages (``pip_as_colab`` makes
  pip read environment markers as Colab's Python).
- ``closure``: the image packages the result leans on, with their real requirements from PyPI.
- ``remote``: wheels on PyPI read over HTTP Range requests; the simple index.
- ``elf``, ``inflate_tail``, ``wheel_elf``: DT_NEEDED of every shared library in a wheel, reading
  a dynamic section near the end of a compressed member from the end.
- ``links``: who provides each needed library, and whether the loader would find it.
- ``check``: the verdict (``PlanCheck``) and its report.

Example::

    >>> from colab_plan import check_plans                           # doctest: +SKIP
    >>> print(check_plans([Path("requirements/colab.txt")])[0].report())  # doctest: +SKIP
"""

from colab_plan.check import PlanCheck, check_plans

__all__ = ["PlanCheck", "check_plans"]
