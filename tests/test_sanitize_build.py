"""The build switches of setup.py (MINITRAIN_SANITIZE, the ISA levels per machine), and that a
sanitizer run tests the kernels it asked for: .ci/run sets MINITRAIN_EXPECT_SANITIZE to the list
it built with, and a normal run expects a normal build."""
import os
import runpy

import pytest

import minitrain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def setup_py():
    """setup.py's functions, loaded without running setup()."""
    return runpy.run_path(os.path.join(ROOT, "setup.py"), run_name="setup_under_test")


def test_the_kernels_under_test_are_built_as_expected():
    expected = os.environ.get("MINITRAIN_EXPECT_SANITIZE", "")
    assert ",".join(minitrain.cpu_info().sanitizers) == expected


def test_sanitizer_switch(setup_py):
    assert setup_py["requested_sanitizers"](None) == []
    assert setup_py["requested_sanitizers"]("address, undefined") == ["address", "undefined"]
    assert setup_py["sanitizer_flags"](["address", "undefined"]) == [
        "-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    assert setup_py["sanitizer_flags"]([]) == []
    with pytest.raises(SystemExit, match="MINITRAIN_SANITIZE='address,thread': unknown sanitizer"):
        setup_py["requested_sanitizers"]("address,thread")


def test_sanitized_builds_default_to_their_own_directory(setup_py, monkeypatch):
    from setuptools.dist import Distribution
    monkeypatch.setitem(setup_py["build_sanitized_apart"].initialize_options.__globals__, "SANITIZE", ["address"])
    command = setup_py["build_sanitized_apart"](Distribution())
    assert command.build_base == os.path.join("build", "sanitize")
    monkeypatch.setitem(setup_py["build_sanitized_apart"].initialize_options.__globals__, "SANITIZE", [])
    assert setup_py["build_sanitized_apart"](Distribution()).build_base == "build"


@pytest.mark.parametrize("machine, levels", [
    ("x86_64", {"baseline": ["-march=x86-64-v2"], "avx2": ["-march=x86-64-v3"], "avx512": ["-march=x86-64-v4"]}),
    ("AMD64", {"baseline": ["-march=x86-64-v2"], "avx2": ["-march=x86-64-v3"], "avx512": ["-march=x86-64-v4"]}),
    ("aarch64", {"baseline": []}),      # the compiler's default armv8-a target: NEON is part of it
    ("arm64", {"baseline": []}),
])
def test_isa_levels_per_machine(setup_py, monkeypatch, machine, levels):
    monkeypatch.setattr(setup_py["platform"], "machine", lambda: machine)
    assert setup_py["isa_levels"]() == levels
