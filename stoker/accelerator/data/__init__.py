"""Prepared data loaders: the rebuild of a user's loader (``prepare.py``), the loader that iterates it with a
resumable position (``loader.py``), the samplers (``samplers.py``) and the sharding of iterable datasets
(``iterable_shard.py``)."""
