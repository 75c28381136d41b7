"""The tests' tiny random models, from :mod:`pmi_decode.testing` (where benchmarks reach them too).

Kept so that the tests' ``from tiny_models import ...`` lines need no change.
"""

from pmi_decode.testing import *  # noqa: F401,F403
from pmi_decode.testing import __all__  # noqa: F401
