import os

import lit.formats

config.name = "amk"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Inputs"]
# Parse, print generically, re-parse: the custom and generic forms must agree.
config.substitutions.append(
    ("%roundtrip", "amk-opt %s --print-op-generic --split-input-file | amk-opt --split-input-file | filecheck %s")
)
config.environment["PATH"] = os.environ["PATH"]
config.environment["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
