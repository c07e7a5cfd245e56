"""``import automegakernel as amk`` is ``import amk``: the distribution's name as a module."""

import sys

import amk

sys.modules[__name__] = amk
