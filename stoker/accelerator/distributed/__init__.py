"""Processes: the strategies (``strategy.py`` builds one; ``ddp.py`` one device and DDP, ``fsdp.py`` FSDP2), the
collectives written on them (``collectives.py``) and launching worker processes (``launch.py``)."""
