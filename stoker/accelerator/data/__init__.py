"""Prepared data loaders: the rebuild of a user's loader (``prepare.py``), the loader that iterates it with a
resumable position (``loader.py``), the samplers (``samplers.py``), the sharding of iterable datasets
(``iterable_shard.py``), positions that hold on any process count (``position.py``) and the global-RNG draws of a
user's loader (``draws.py``)."""
