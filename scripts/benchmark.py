#!/usr/bin/env python3
"""Benchmark ONNX models side by side: see ``nnadapter_tvm.tools.benchmark`` (also ``nnadapter-tvm bench``)."""

import sys

from nnadapter_tvm.tools.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
