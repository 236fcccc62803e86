"""The package imports without a GPU and documents what it exports."""
import inspect

import flashjit

ERROR_CLASSES = {
    "SpecError": "spec", "ShapeError": "shape", "CompileError": "compile",
    "DriverError": "driver", "NoDeviceError": "no-device", "CacheError": "cache",
    "IoError": "io", "UsageError": "usage",
}


def test_version_is_the_generators():
    assert flashjit.__version__ == flashjit.version()
    assert flashjit.version().count(".") == 2


def test_every_export_exists_and_has_a_docstring():
    for name in flashjit.__all__:
        value = getattr(flashjit, name)
        doc = inspect.getdoc(value)
        assert doc and len(doc) > 20, f"flashjit.{name} has no docstring"


def test_help_of_attention_names_its_layout_and_causal_alignment():
    doc = inspect.getdoc(flashjit.attention)
    assert "[batch, seqlen_q, heads_q, head_dim_qk]" in doc
    assert "bottom-right" in doc


def test_kernel_methods_are_documented():
    for method in ("compile", "__call__", "backward", "reports", "backward_workspace_bytes"):
        assert inspect.getdoc(getattr(flashjit.Kernel, method)), method


def test_one_error_class_per_kind_under_flashjit_error():
    assert issubclass(flashjit.Error, RuntimeError)
    for name, kind in ERROR_CLASSES.items():
        cls = getattr(flashjit, name)
        assert issubclass(cls, flashjit.Error) and cls is not flashjit.Error
        assert cls.kind == kind
        assert cls.__module__ == "flashjit"


def test_has_device_is_false_here_or_names_a_gpu():
    if flashjit.has_device():
        assert flashjit.device_info()["sm_count"] > 0
    else:
        try:
            flashjit.device_info()
        except flashjit.NoDeviceError as error:
            assert str(error)
        else:
            raise AssertionError("device_info() without a GPU must raise NoDeviceError")


def test_the_committed_stub_covers_the_extension():
    import ast
    import pathlib
    stub = pathlib.Path(flashjit.__file__).parent / "_core.pyi"
    tree = ast.parse(stub.read_text())
    declared = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    declared |= {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                 for alias in node.names}
    public = {name for name in dir(flashjit._core) if not name.startswith("_")}
    assert public <= declared, f"regenerate python/flashjit/_core.pyi (nanobind.stubgen): {public - declared}"
