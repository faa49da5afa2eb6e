#!/usr/bin/env python3
"""Auto-tune a model with MetaSchedule: see ``nnadapter_tvm.tools.tune_command`` (also ``nnadapter-tvm tune``)."""

import sys

from nnadapter_tvm.tools.tune_command import main

if __name__ == "__main__":
    sys.exit(main())
