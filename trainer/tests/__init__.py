# Lets `python -m unittest discover -s trainer/tests -t trainer` import the tests as the package
# `tests`: their helpers (_util, the *_child.py scripts) are imported by their own names.
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if _here not in sys.path:
    sys.path.insert(0, _here)
