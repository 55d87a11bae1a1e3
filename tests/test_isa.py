"""The AVX2 path run where it is not the default: on a CPU with AVX-512, the numerics tests (kernel,
drafters, lessons, batches) run again with the AVX2 build of the block kernel, torch's AVX2 vector
kernels and MKL held to AVX2, so a failure that only an AVX2-only machine would show is seen on the
machine the code is written on. (The reverse, AVX-512 on an AVX2 CPU, cannot run.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.runtime import machine

ROOT = Path(__file__).resolve().parent.parent
# what makes an AVX-512 machine compute as an AVX2-only one: our kernel's build, torch's dispatch, MKL's
AVX2_ENV = {"SPECVIZ_KERNEL_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
# the tests whose floats depend on the instruction set (pages and slow suites left out: they add no numerics)
NUMERICS_TESTS = ["tests/test_kernel.py", "tests/test_eagle_drafter.py", "tests/test_lesson.py", "tests/test_batch.py"]


def _has_avx512() -> bool:
    return "avx512f" in machine.cpuinfo_field("flags").split()


def _numerics(env: dict) -> str:
    code = "from specviz.runtime import machine, qkernel; qkernel.library(); print(machine.numerics())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_the_avx2_override_computes_as_an_avx2_cpu_and_passes_the_numerics_tests():
    """With AVX2_ENV a process reports AVX2 numerics: torch's AVX2 kernels and the 256-bit block kernel.
    On an AVX2-only CPU that changes nothing (this whole run already is the AVX2 run); on an AVX-512
    CPU the numerics tests then run again under it."""
    forced, native = _numerics(AVX2_ENV), _numerics({})
    assert forced.startswith("torch AVX2") and forced.endswith("block kernel 256"), forced
    vendor = machine.cpu_vendor()
    assert not vendor or f"({vendor})" in forced
    if not _has_avx512():
        assert forced == native, "on an AVX2-only CPU the override must change nothing"
        return
    assert forced != native
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow and not browser",
           "-k", "not page and not button and not deep_link", *NUMERICS_TESTS]
    out = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **AVX2_ENV}, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert " passed" in out.stdout.strip().splitlines()[-1], out.stdout[-2000:]


def test_the_cpu_id_names_the_generation_and_model_is_not_model_name():
    text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 1\n"
    assert machine.cpu_id(text) == "family 25 model 1 stepping 1"
    assert machine.cpuinfo_field("model name", text) == "AMD EPYC"
    assert machine.cpu_id("model name\t: AMD EPYC\n") == ""  # a model name alone says nothing of the generation
    assert "cpu_id" in machine.machine()
