"""Where kernels run (amk/environment.py): ``TRITON_INTERPRET`` read as Triton reads it, and a process without a GPU
whose interpreter is turned off refused with an amk error rather than a Triton one at the first call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import CPU_ONLY

from amk.environment import interpreting


@pytest.mark.parametrize("value", ["1", "0", "", "true", "false", "off", "On", "yes", "2"])
def test_interpreting_reads_triton_interpret_as_triton_does(monkeypatch, value):
    """Triton's interpreter runs kernels exactly when its own setting says so; amk must not read the variable
    otherwise ("false", "off" and "2" are off for Triton)."""
    from triton import knobs

    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert interpreting() is knobs.runtime.interpret


# Without a GPU: the interpreter turned off leaves kernels nowhere to run. Each entry point says so, as an amk error.
NOWHERE_TO_RUN = textwrap.dedent("""
    import json, torch, amk
    from amk.errors import DeviceError
    results = []
    for call in (lambda: amk.build_fused_kernel(["relu"], [(8, 16)], torch.float32)(torch.randn(8, 16)),
                 lambda: amk.compile(torch.nn.Linear(16, 8))(torch.randn(4, 16))):
        try:
            call()
            results.append("ran")
        except DeviceError as error:
            results.append(str(error))
    print(json.dumps(results))
""")


@CPU_ONLY
@pytest.mark.parametrize("value", ["0", "off"])
def test_no_gpu_and_the_interpreter_turned_off_is_a_device_error(tmp_path, value):
    environment = dict(os.environ, TRITON_INTERPRET=value, AMK_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", NOWHERE_TO_RUN], capture_output=True, text=True, env=environment,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    assert len(results) == 2
    for message in results:
        assert message.startswith(f"TRITON_INTERPRET={value!r} turns Triton's interpreter off, and there is no CUDA GPU")
        assert "set TRITON_INTERPRET=1 (or leave it unset)" in message
