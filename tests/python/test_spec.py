"""Specs from dicts, YAML text and files, and their errors as SpecError with the location."""
import pathlib

import pytest

import flashjit

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_dict_spec_resolves_every_field():
    spec = flashjit.spec({"head_dim_qk": 192, "head_dim_v": 128, "dtype": "bf16", "causal": True})
    assert (spec.head_dim_qk, spec.head_dim_v, spec.dtype, spec.causal) == (192, 128, "bf16", True)
    assert spec.name == "qk192_v128_bf16_causal"
    assert spec.mask == "none"
    assert "head_dim_qk: 192" in spec.to_yaml()


def test_dict_with_a_mask_and_nested_maps():
    spec = flashjit.spec({"head_dim": 64, "mask": {"sliding_window": {"left": 256, "right": 0}},
                          "backward": {"deterministic": True}})
    assert (spec.mask, spec.window_left, spec.window_right) == ("sliding_window", 256, 0)
    assert spec.deterministic


def test_yaml_text_and_file_and_pathlike_agree():
    path = REPO / "configs" / "hd100_causal_bf16.yaml"
    from_path = flashjit.spec(path)
    from_str = flashjit.spec(str(path))
    from_text = flashjit.spec(path.read_text())
    assert from_path.to_yaml() == from_str.to_yaml() == from_text.to_yaml()
    assert from_path.head_dim_qk == 100 and from_path.causal


def test_spec_passes_through_a_spec():
    spec = flashjit.spec({"head_dim": 64})
    assert flashjit.spec(spec) is spec


def test_yaml_typo_is_a_spec_error_with_line_column_and_suggestion():
    with pytest.raises(flashjit.SpecError) as caught:
        flashjit.spec("head_dim: 64\ncasual: true\n")
    message = str(caught.value)
    assert "<string>:2:1" in message
    assert "casual" in message and "causal" in message


def test_dict_typo_names_the_dict_and_the_key_line():
    with pytest.raises(flashjit.SpecError) as caught:
        flashjit.spec({"head_dim": 64, "casual": True})
    message = str(caught.value)
    assert "<dict>:3:" in message and "casual" in message


def test_out_of_range_value_is_a_spec_error_naming_the_field():
    with pytest.raises(flashjit.SpecError, match="head_dim"):
        flashjit.spec({"head_dim": 513})


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("head_dim: 64\ndtype: fp32\n")
    with pytest.raises(flashjit.SpecError) as caught:
        flashjit.spec(bad)
    assert f"{bad}:2:" in str(caught.value)


def test_missing_file_is_an_io_error(tmp_path):
    with pytest.raises(flashjit.IoError):
        flashjit.spec(str(tmp_path / "absent.yaml"))


def test_other_types_are_type_errors():
    with pytest.raises(TypeError):
        flashjit.spec(64)


def test_kernel_takes_every_spec_form_without_a_gpu():
    kernel = flashjit.kernel({"head_dim": 72, "dtype": "fp16"})
    assert kernel.spec.name == "qk72_v72_fp16"
    assert "qk72_v72_fp16" in repr(kernel)
