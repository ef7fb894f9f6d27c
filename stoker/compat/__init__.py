"""The peers' surfaces: how an Accelerate or Lightning user gets in, translated into the core's own objects.

The core (``stoker.accelerator``, ``stoker.trainer``, ``stoker.callbacks``, ``stoker.loggers``) never imports this
package; ``stoker.utils``, ``stoker.logging``, ``stoker.local_sgd`` and the package face re-export from it.
"""
