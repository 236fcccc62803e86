"""Bundles from Python (through the `flashjit` program the wheel carries), their registration,
and the environment as the C++ library reads it."""
import os

import pytest

import flashjit


def test_cache_dir_is_the_environments():
    assert flashjit.cache_dir() == os.environ["FLASHJIT_CACHE_DIR"]
    env = flashjit.environment()
    assert env["tune_db"] == os.path.join(os.environ["FLASHJIT_CACHE_DIR"], "tune.json")
    assert set(env) == {"cache_dir", "cache_disabled", "dump_dir", "verbose", "tune_db",
                        "nvrtc_library"}


def test_build_bundle_from_a_dict_and_register_it(tmp_path):
    output = tmp_path / "kernels.fjb"
    manifest = flashjit.build_bundle([{"head_dim": 40, "dtype": "fp16"}], output,
                                     archs=["sm_80"], align="16")
    assert output.is_file()
    names = [k["kernel_name"] for k in manifest["kernels"]]
    assert len(names) == 1 and names[0].startswith("fa_fwd_qk40_v40_fp16")
    flashjit.register_bundle(output)
    flashjit.register_bundle(output.read_bytes(), name="the same, from memory")


def test_build_bundle_usage_error_comes_back_as_its_class(tmp_path):
    with pytest.raises(flashjit.UsageError, match="sm_70"):
        flashjit.build_bundle([{"head_dim": 40}], tmp_path / "x.fjb", archs=["sm_70"])


def test_a_corrupt_bundle_is_an_io_error(tmp_path):
    bad = tmp_path / "bad.fjb"
    bad.write_bytes(b"not a bundle")
    with pytest.raises(flashjit.IoError):
        flashjit.register_bundle(bad)
    with pytest.raises(flashjit.IoError):
        flashjit.register_bundle(b"not a bundle either")


def test_tune_without_a_gpu_is_a_no_device_error():
    if flashjit.has_device():
        pytest.skip("this machine has a GPU: tuning would run")
    with pytest.raises(flashjit.NoDeviceError):
        flashjit.tune([{"head_dim": 64}], seqlens=[1024])


def test_tune_backward_without_a_gpu_is_a_no_device_error():
    if flashjit.has_device():
        pytest.skip("this machine has a GPU: tuning would run")
    # A spec's own tiles are the forward's: they do not stop the backward's tuning.
    fixed = {"head_dim": 64, "tiles": {"block_m": 64, "block_n": 64, "warps": 4, "stages": 2}}
    with pytest.raises(flashjit.NoDeviceError):
        flashjit.tune([fixed], seqlens=[1024], backward=True)
    with pytest.raises(flashjit.UsageError, match="fixes its tiles"):
        flashjit.tune([fixed], seqlens=[1024])


def test_tune_backward_refuses_a_block_sparse_spec_before_the_gpu():
    sparse = {"head_dim": 64, "mask": {"block_sparse": {"block_q": 128, "block_k": 128}}}
    with pytest.raises(flashjit.UsageError, match="leave the backward's tiles to the heuristic"):
        flashjit.tune([sparse], seqlens=[1024], backward=True)


def test_tune_decode_without_a_gpu_is_a_no_device_error():
    if flashjit.has_device():
        pytest.skip("this machine has a GPU: tuning would run")
    with pytest.raises(flashjit.NoDeviceError):
        flashjit.tune_decode([{"head_dim": 128}], batches=[1], seqlens_k=[32768])


def test_tune_decode_refuses_a_shape_that_would_not_decode_before_the_gpu():
    # 128 new rows x a GQA group of 4 is past decode's 64 packed rows.
    with pytest.raises(flashjit.UsageError):
        flashjit.tune_decode([{"head_dim": 128}], batches=[1], seqlens_k=[32768], seqlen_q=128)
