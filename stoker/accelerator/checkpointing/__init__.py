"""Checkpoint I/O, the engine's second half: what ``save_state``/``load_state`` write and read, and how.

It never sees the Accelerator: the facade describes what to save in a :class:`~.contents.CheckpointContents`
(named models, optimizers, schedulers, loaders, custom objects, precision, window counters, strategy) and calls
``checkpoint.save_state`` / ``checkpoint.load_state`` with it.

- ``checkpoint.py``: what a checkpoint holds, under which names, and the order of a save and of a load
- ``contents.py``: the description of what to save that the facade builds
- ``atomic.py``: manifest, verification, atomic commit, folder copy/replace/remove, automatic naming and rotation
- ``background.py``: the background writer/deleter (asynchronous saves, deletions off the training thread)
- ``safetensors_io.py``: safetensors bytes (written in parallel, fsynced, CRC-checked)
- ``tree.py``: any nested state (dicts, lists, tensors, numbers) as one safetensors file, without pickle
- ``weights.py``: exported model weights (``save_model`` / ``load_checkpoint_in_model``), sharded and tied
- ``rng.py``: every random-number generator's state
- ``torch_file.py``: single-file ``torch.save`` checkpoints (a Lightning ``.ckpt``), read without unpickling code
"""
