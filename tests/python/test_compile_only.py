"""Compiles without a GPU (NVRTC is on the CPU machine): reports as dicts with the keys of
`flashjit compile --json`, the disk cache's hits, and compile errors as their classes."""
import pytest

import flashjit

REPORT_KEYS = {"kernel_name", "target", "tiles", "registers", "shared_bytes", "spill_store_bytes",
               "spill_load_bytes", "stack_bytes", "compile_ms", "cache_hit", "cache_file"}


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_compile_only_reports_a_kernel_without_spills(target):
    report = flashjit.compile_only({"head_dim": 100, "dtype": "bf16", "causal": True}, target)
    assert set(report) == REPORT_KEYS
    assert report["target"] == target
    assert report["kernel_name"].startswith("fa_fwd_qk100_v100_bf16_causal")
    assert report["registers"] > 0 and report["shared_bytes"] > 0
    assert report["spill_store_bytes"] == 0 and report["spill_load_bytes"] == 0
    assert set(report["tiles"]) == {"block_m", "block_n", "warps", "stages"}


def test_second_compile_is_a_cache_hit():
    spec = {"head_dim": 40, "dtype": "fp16"}
    first = flashjit.compile_only(spec, "sm_80")
    again = flashjit.compile_only(spec, "sm_80")
    assert again["kernel_name"] == first["kernel_name"]
    assert again["cache_hit"] and again["compile_ms"] == 0


def test_compile_backward_only_gives_three_kernels_in_launch_order():
    reports = flashjit.compile_backward_only({"head_dim": 64, "dtype": "bf16"}, "sm_90a")
    assert len(reports) == 3
    assert [r["target"] for r in reports] == ["sm_90a"] * 3
    assert "pre" in reports[0]["kernel_name"]


def test_kernel_compile_for_a_named_target_needs_no_gpu():
    kern = flashjit.kernel({"head_dim": 40, "dtype": "fp16"})
    reports = kern.compile("sm_80")
    assert len(reports) == 1 and reports[0]["target"] == "sm_80"
    assert kern.reports() == []  # nothing was loaded onto a GPU


def test_kernel_compile_for_this_gpu_without_one_is_a_no_device_error():
    if flashjit.has_device():
        pytest.skip("this machine has a GPU")
    with pytest.raises(flashjit.NoDeviceError):
        flashjit.kernel({"head_dim": 40}).compile()


def test_unknown_target_is_an_error_of_the_library():
    with pytest.raises(flashjit.Error) as caught:
        flashjit.compile_only({"head_dim": 64}, "sm_70")
    assert "sm_70" in str(caught.value)


def test_a_spec_pinned_to_sm90a_refuses_sm80():
    with pytest.raises(flashjit.Error, match="sm90a"):
        flashjit.compile_only({"head_dim": 64, "arch": "sm90a"}, "sm_80")
