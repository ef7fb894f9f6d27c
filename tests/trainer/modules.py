"""Old import path of the Trainer tests' helpers, kept so that tests written against it still import.

The helpers live in ``tests.helpers``: ``Regressor``, ``raw_loop`` and ``make_scheduler`` in
``tests.helpers.models``, the hook recorder in ``tests.helpers.hooks``. Import them from there; nothing is
defined here.
"""

from tests.helpers.hooks import HookRecorder as Recorder  # noqa: F401
from tests.helpers.models import Regressor, make_scheduler, raw_loop  # noqa: F401
