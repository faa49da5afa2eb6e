"""The console script: devices, and run twice (compile, then load from the cache)."""

import os
import re
import subprocess
import sys

from nnadapter_tvm.tools.cli import main


def test_devices(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^llvm\s+Apache TVM\s+CPU\s+1\s+yes", out, re.M)
    assert "TVM_OPT_LEVEL" in out


def test_run_twice_second_loads_from_cache(tmp_path):
    cmd = [sys.executable, "-m", "nnadapter_tvm.tools.cli", "run", "--cache-dir", str(tmp_path)]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    second = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    token = re.search(r"token: ([0-9a-f]{32})", first).group(1)
    assert os.listdir(tmp_path) == [token + ".nnc"]
    assert "compiling" in first and "(this run)" in first
    assert "found in the cache" in second and "recorded when the cache was written" in second
    for out in (first, second):
        # The ratio itself is a performance figure, printed for people, not asserted here.
        assert re.search(r"cached load: .* ms  -> \d+x faster than compiling", out), out
        assert "softmax row sums [1.00000]" in out
    # Same deterministic weights and input: same predictions both times.
    assert re.findall(r"sample 0: .*", first) == re.findall(r"sample 0: .*", second)


def test_bad_property_exit_code(tmp_path, capsys):
    assert main(["run", "--cache-dir", str(tmp_path), "--properties", "BOGUS=1"]) == 2
    assert "unknown context property 'BOGUS'" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
