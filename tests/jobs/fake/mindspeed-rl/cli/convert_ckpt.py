"""Fake MindSpeed-RL cli/convert_ckpt.py (see fakelib.convert)."""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]  # fakelib.py: next to the script or one level up
from fakelib import convert  # noqa: E402

convert(sys.argv[1:])
