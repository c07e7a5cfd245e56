"""Writing the IR after every pass: used by ``amk-opt --dump-ir-dir`` and by ``amk.compile(dump_ir=...)``."""

from __future__ import annotations

import os
from io import StringIO
from typing import TextIO

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.printer import Printer


def module_text(module: ModuleOp) -> str:
    stream = StringIO()
    Printer(stream=stream).print_op(module)
    return stream.getvalue() + "\n"


class IRDumper:
    """A PassPipeline callback: numbered files ``00-input.mlir``, ``01-amk-fuse.mlir``, ... and/or a stream."""

    def __init__(self, directory: str | os.PathLike | None = None, stream: TextIO | None = None, prefix: str = ""):
        self.directory = directory
        self.stream = stream
        self.prefix = prefix
        self.count = 0
        if directory is not None:
            os.makedirs(directory, exist_ok=True)

    def __call__(self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None) -> None:
        label = previous.name if previous is not None else "input"
        text = module_text(module)
        if self.stream is not None:
            self.stream.write(f"// -----// IR after {label} //----- //\n{text}\n")
        if self.directory is not None:
            path = os.path.join(self.directory, f"{self.prefix}{self.count:02d}-{label}.mlir")
            with open(path, "w") as handle:
                handle.write(text)
        self.count += 1
