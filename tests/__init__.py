# A package, so ``from tests.conftest import ...`` finds this folder and the module pytest loaded:
# IPython 7 (Colab's) puts its own ``tests`` package on sys.path, which beats a folder without this file.
