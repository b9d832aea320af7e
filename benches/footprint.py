"""Install footprint and first-count memory of ctxengine against tiktoken (for the README).

    python benches/footprint.py [--wheel PATH]

Prints JSON: installed size of each package (the files of its distribution), the wheel's size
when given, and the peak resident memory (VmHWM) of a fresh interpreter that imports the package
and counts one short string with ``o200k_base``, minus that of a bare interpreter. tiktoken
reads its rank file from the shared data folder (``tests/offline_tiktoken.py``), as in the tests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBES = {
    "bare": "pass",
    "ctxengine": (
        "import ctxengine; assert ctxengine.count_tokens('hello world', model='gpt-4o') == 2"
    ),
    "tiktoken": (
        f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); "
        "from offline_tiktoken import encoding; "
        "assert len(encoding('o200k_base').encode_ordinary('hello world')) == 2"
    ),
}


def installed_bytes(dist: str) -> int:
    files = metadata.distribution(dist).files or []
    return sum(f.locate().stat().st_size for f in files if Path(f.locate()).is_file())


def peak_rss_kib(code: str) -> int:
    probe = f"{code}\nprint([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wheel", type=Path, help="a built ctxengine wheel to report the size of")
    args = parser.parse_args()
    bare = peak_rss_kib(PROBES["bare"])
    out: dict[str, object] = {"python": sys.version.split()[0], "bare_interpreter_kib": bare}
    for dist in ("ctxengine", "tiktoken"):
        peak = peak_rss_kib(PROBES[dist])
        out[dist] = {
            "installed_bytes": installed_bytes(dist),
            "first_count_peak_rss_kib": peak,
            "first_count_extra_kib": peak - bare,
        }
    if args.wheel:
        out["wheel_bytes"] = args.wheel.stat().st_size
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
