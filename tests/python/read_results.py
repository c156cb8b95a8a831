"""Reads a CSV file (argv[1]) as a notebook would, with Python's csv module and with pandas,
and prints what each saw as JSON: {"csv": [{column: text}], "pandas": {"columns": [...],
"rows": [{column: value or null}], "dtypes": {column: dtype}}}. With `summary` as argv[2],
only the row count, the columns, their dtypes and the rows per `name` (for a long series).
A file either cannot read raises."""

import csv
import json
import math
import sys

import pandas as pd

path = sys.argv[1]
if sys.argv[2:] == ["summary"]:
    frame = pd.read_csv(path)
    json.dump(
        {
            "len": len(frame),
            "columns": list(frame.columns),
            "dtypes": {k: str(v) for k, v in frame.dtypes.items()},
            "by_name": {k: int(v) for k, v in frame.groupby("name").size().items()},
            "value_sum": float(frame["value"].sum()),
        },
        sys.stdout,
    )
    sys.exit(0)

with open(path, newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))

frame = pd.read_csv(path)


def plain(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


json.dump(
    {
        "csv": rows,
        "pandas": {
            "columns": list(frame.columns),
            "rows": [{k: plain(v) for k, v in r.items()} for r in frame.to_dict("records")],
            "dtypes": {k: str(v) for k, v in frame.dtypes.items()},
            "len": len(frame),
        },
    },
    sys.stdout,
)
