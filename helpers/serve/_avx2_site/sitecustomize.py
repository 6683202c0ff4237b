"""Makes every Python process of a server see an AVX2-only CPU (``VLLM_COURSE_CPU_ISA=avx2``).

Python imports ``sitecustomize`` at start-up from the first folder on ``sys.path`` that has one;
``helpers.serve.engine_env.avx2_emulation_env`` puts this folder first on ``PYTHONPATH`` for the server's
processes only. Environment variables limit oneDNN, ATen and MKL to AVX2, but vLLM picks its own
kernel library (``_C_AVX2`` or ``_C_AVX512``) and attention kernels by asking ``torch.cpu`` what
the hardware has, which no variable changes: this answers those questions as an AVX2 CPU would,
once ``torch.cpu`` is imported (importing torch here would change the order vLLM sets it up in).
"""

import importlib.abc
import os
import sys

_HIDDEN = ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_avx512_vnni_supported",
           "_is_amx_tile_supported", "_is_amx_fp16_supported")


def _limit(module) -> None:
    for name in _HIDDEN:
        if hasattr(module, name):
            setattr(module, name, lambda: False)


class _PatchTorchCpu(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "torch.cpu":
            return None
        sys.meta_path.remove(self)  # let the normal finders load it, once
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _limit(module)

        loader.exec_module = exec_module
        return spec


if os.environ.get("VLLM_COURSE_CPU_ISA") == "avx2":
    import importlib.util

    if "torch.cpu" in sys.modules:
        _limit(sys.modules["torch.cpu"])
    else:
        sys.meta_path.insert(0, _PatchTorchCpu())
