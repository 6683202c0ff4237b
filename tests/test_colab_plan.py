"""requirements/colab.txt, checked against Colab's published GPU image without Colab or a GPU.

pip's own resolver runs on stubs of the image's packages (scripts/colab_plan); vLLM's wheel is read
over HTTP Range requests for the libraries its extensions link to. The committed plan must install
vLLM 0.26.0 on PyPI's CUDA 13 torch, touch none of Colab's kernel packages, and leave no library
unprovided. The plan it replaced (``vllm==0.26.0`` alone) must be shown broken by the same check,
so the check is known to be able to fail. Needs PyPI; about one to two minutes on two cores.
The image's files are read from tests/data/colab-image (or $COLAB_IMAGE_DIR).
"""

import importlib.util
import setuptools  # noqa: F401  before anything imports the stdlib's distutils: torch imports setuptools
# later in this process (vLLM's parser, in other tests), and setuptools refuses a distutils not its own
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from colab_plan.check import check_plans, torch_cuda_major  # noqa: E402
from colab_plan.elf import dynamic_info  # noqa: E402
from colab_plan.image import ALSO_KEPT, DEFAULT_FOLDER, KERNEL_PACKAGES, load_image  # noqa: E402
from colab_plan.links import for_this_python  # noqa: E402
from colab_plan.wheel_elf import member_needs  # noqa: E402

PLAN = ROOT / "requirements" / "colab.txt"
OLD_PLAN = "vllm==0.26.0\n"  # what requirements/colab.txt asked for before (besides -r common.txt)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Both plans checked once, side by side (they share what was read from PyPI)."""
    if not (DEFAULT_FOLDER / "pip-freeze-gpu.txt").is_file():
        pytest.fail(f"Colab's published image files are not in {DEFAULT_FOLDER}: set COLAB_IMAGE_DIR")
    old = tmp_path_factory.mktemp("plans") / "old_colab.txt"
    old.write_text(OLD_PLAN)
    new_result, old_result = check_plans([PLAN, old], load_image(DEFAULT_FOLDER))
    return {"new": new_result, "old": old_result}


@pytest.mark.network  # the resolver and the wheel's ELF reads ask PyPI
def test_the_plan_installs_vllm_0_26_on_pypis_cuda_13_torch(checked):
    result = checked["new"]
    assert result.vllm == "0.26.0", result.report()
    assert (result.torch, result.torch_origin, result.torch_cuda) == ("2.11.0", "plan", 13), result.report()
    torch_wheel = result.closure.installed["torch"].wheel
    assert torch_wheel.url.startswith("https://files.pythonhosted.org/"), torch_wheel.url
    assert torch_wheel.filename.startswith("torch-2.11.0-cp313-cp313-manylinux"), torch_wheel.filename


@pytest.mark.network  # the resolver and the wheel's ELF reads ask PyPI
def test_the_plan_brings_everything_the_notebooks_import_that_the_image_lacks(checked):
    installed = checked["new"].closure.installed
    assert installed["vllm-router"].version == "0.1.17"  # notebook 06's router (requirements/common.txt's pin)
    assert "gguf" in installed  # the embedded model's conversion


@pytest.mark.network  # the resolver and the wheel's ELF reads ask PyPI
def test_pip_read_the_requirements_markers_as_colabs_python_3_13_does(checked):
    result = checked["new"]
    # vLLM 0.26 asks for setuptools>=77.0.3,<81 only `; python_version > "3.11"`: the image has 75.2.0.
    # Read as this machine's Python 3.11 the requirement would vanish and setuptools stay as it is.
    assert result.changed.get("setuptools", ("", "0"))[0] == "75.2.0", result.report()
    assert Version("77.0.3") <= Version(result.installs["setuptools"]) < Version("81"), result.report()


@pytest.mark.network  # the resolver and the wheel's ELF reads ask PyPI
def test_torch_and_vllms_extensions_use_the_same_cuda_major(checked):
    result = checked["new"]
    # vLLM's major is read from the libcudart.so.NN its extensions link to, not from a table.
    assert result.vllm_cuda == {result.torch_cuda} == {13}, result.report()


@pytest.mark.network  # the resolver and the wheel's ELF reads ask PyPI
def test_no_kernel_package_nor_ipywidgets_nor_psutil_changes(checked):
    result = checked["new"]
    touched = {name: result.installs[name] for name in KERNEL_PACKAGES + ALSO_KEPT if name in result.installs}
    assert touched == {}, result.report()


@pytest.mark.network  # the resolver and the wheel's ELF reads ask PyPI
def test_every_library_vllms_extensions_link_to_is_provided(checked):
    result = checked["new"]
    assert result.links is not None and len(result.links.needed_by) >= 10, result.report()
    assert result.missing == [], "\n" + result.report()
    # torch's own libraries come from the plan's torch, CUDA's from its CUDA 13 runtime.
    assert [p.by for p in result.links.loadable("libtorch_cuda.so")] == ["torch 2.11.0 (plan)"]
    assert any(p.folder == "nvidia/cu13/lib" for p in result.links.loadable("libcudart.so.13")), result.report()


@pytest.mark.network  # the resolver and the wheel's ELF reads ask PyPI
def test_the_image_packages_the_plan_leans_on_keep_their_requirements_met(checked):
    result = checked["new"]
    assert result.closure.unmet == [] and result.closure.unreadable == {}, result.report()
    assert result.ok, result.report()


@pytest.mark.network  # the resolver and the wheel's ELF reads ask PyPI
def test_the_old_plan_is_shown_broken_by_the_same_check(checked):
    result = checked["old"]
    # Colab's CUDA 12 torch is kept (2.11.0+cu128 satisfies ==2.11.0) under vLLM's CUDA 13 extensions.
    assert (result.torch, result.torch_origin, result.torch_cuda) == ("2.11.0+cu128", "image", 12), result.report()
    assert result.vllm_cuda == {13}, result.report()
    assert "libcudart.so.13" in result.missing, result.report()
    assert {"libtorch.so", "libc10.so"} <= set(result.missing), result.report()
    assert not result.ok


# Offline pieces of the check, each against a reference that reads whole files.

def test_the_elf_reader_agrees_with_readelf():
    binary = Path(sys.executable).resolve()
    data = binary.read_bytes()
    needed = dynamic_info(lambda start, end: data[start:end]).needed
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    listing = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
    assert list(needed) == [line.split("[", 1)[1].rstrip("]") for line in listing.splitlines() if "(NEEDED)" in line]


def test_a_dynamic_section_read_from_the_end_of_a_zip_member_is_exact(tmp_path):
    # numpy's core extension: 10 MB, its dynamic section 99 % of the way in, like vLLM's big ones.
    library = Path(importlib.util.find_spec("numpy._core._multiarray_umath").origin)
    archive_path = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive_path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(library, "pkg/lib.so")
    raw = archive_path.read_bytes()
    read = set()

    def read_at(at, n):
        read.update(range(at // 4096, (at + n) // 4096 + 1))  # which 4 KiB pages were asked for
        return raw[at:at + n]

    with zipfile.ZipFile(archive_path) as archive:
        from_the_end = member_needs(archive, read_at, "pkg/lib.so", stream_limit=0)
        whole = archive.read("pkg/lib.so")
    assert from_the_end == dynamic_info(lambda start, end: whole[start:end])
    assert "libc.so.6" in from_the_end.needed
    assert len(read) * 4096 < len(raw) / 2, "it inflated the member from the start instead"


def test_cuda_majors_and_python_tags_are_read_from_names():
    assert torch_cuda_major("2.11.0+cu128", ()) == 12
    assert torch_cuda_major("2.11.0", ("cuda-toolkit[cublas,cudart]==13.0.2; platform_system == 'Linux'",)) == 13
    assert torch_cuda_major("2.13.0+cpu", ()) is None
    assert not for_this_python("vllm/third_party/deep_gemm/_C.cpython-310-x86_64-linux-gnu.so", (3, 13))
    assert for_this_python("vllm/_C_stable_libtorch.abi3.so", (3, 13))


class _Answer:
    def __init__(self):
        self.headers = {"Content-Encoding": ""}

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def read(self):
        return b"{}"


def test_a_dropped_lookup_is_retried_and_an_answer_from_pypi_is_not(monkeypatch):
    import urllib.error

    from colab_plan import remote

    calls = []

    def flaky(request, timeout):
        calls.append(request.full_url)
        if len(calls) == 1:
            raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
        return _Answer()

    monkeypatch.setattr(remote, "RETRY_S", 0.0)
    monkeypatch.setattr(remote.urllib.request, "urlopen", flaky)
    assert remote._get("https://pypi.org/simple/vllm/")[0] == b"{}" and len(calls) == 2

    def missing(request, timeout):
        calls.append(request.full_url)
        raise urllib.error.HTTPError(request.full_url, 404, "Not Found", None, None)

    calls.clear()
    monkeypatch.setattr(remote.urllib.request, "urlopen", missing)
    with pytest.raises(urllib.error.HTTPError):
        remote._get("https://pypi.org/simple/no-such-project/")
    assert len(calls) == 1

    def down(request, timeout):
        calls.append(request.full_url)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    calls.clear()
    monkeypatch.setattr(remote.urllib.request, "urlopen", down)
    with pytest.raises(urllib.error.URLError):
        remote._get("https://pypi.org/simple/vllm/")
    assert len(calls) == remote.ATTEMPTS
