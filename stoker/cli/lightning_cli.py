"""``LightningCLI``: a training script's command line and config files from the ``__init__`` signatures of its
Trainer, module and data module (Lightning's ``lightning.pytorch.cli.LightningCLI``, renamed ``stoker.cli``)::

    cli = LightningCLI(Net, Data)     # python main.py fit --config run.yaml --trainer.max_epochs 3 --model.lr 0.01

Owns the order of a run: parse (``sys.argv`` or ``args=``; config files, later wins), seed, build the classes,
then call the subcommand's Trainer method (``fit`` / ``validate`` / ``test`` / ``predict``) with the arguments of
that method that the command line gave (``--ckpt_path``). The parser's groups are ``parser.py``'s; the optimizer
built from ``--optimizer`` / ``--lr_scheduler`` is ``optimizers.py``'s; the saved ``config.yaml`` is
``save_config.py``'s. It meets the Trainer only through its constructor and its public methods.
"""

from __future__ import annotations

import sys
import warnings
from functools import partial, update_wrapper
from types import MethodType
from typing import Any, Callable, Union

import yaml
from torch.optim import Optimizer

from ..compat.lightning.args import INERT_DEFAULTS
from ..compat.lightning.seed import seed_everything
from ..compat.lightning.trainer import Trainer
from ..trainer import TrainingModule
from ..trainer.datamodule import DataModule
from ..trainer.overrides import defines_hook
from ..version import __version__
from . import optimizers as optim
from .checkpoint_hparams import config_with_checkpoint_hparams
from .module_hparams import ConfigHparams
from .parser import KEEP_NONE, ActionConfigFile, LightningArgumentParser, Namespace, class_from_function, instantiate
from .save_config import SaveConfigCallback

__all__ = ["ArgsType", "LightningCLI"]

ArgsType = Union[list[str], dict[str, Any], Namespace, None]


class LightningCLI:
    """A command line for a training script, read from the ``__init__`` signatures of its classes.

    Args:
        model_class: The ``TrainingModule`` (or a function returning one); None: any subclass, by ``--model=``.
        datamodule_class: The ``DataModule`` (or a function returning one); None: optional, any subclass by
            ``--data=``.
        save_config_callback: The callback that writes ``config.yaml`` to the log folder (None: none).
        save_config_kwargs: Its arguments (``{"overwrite": True}``, ``{"config_filename": "run.yaml"}``).
        trainer_class: The Trainer (or a function returning one).
        trainer_defaults: The Trainer arguments' defaults; ``callbacks`` given here are always added.
        seed_everything_default: ``--seed_everything``'s default: an int, True (a seed chosen and recorded) or False.
        parser_kwargs: Arguments for the parsers, or a dict per subcommand (``{"fit": {"default_config_files":
            [...]}}``); ``{"default_env": True}`` reads ``PL_FIT__TRAINER__MAX_EPOCHS``-style variables.
        parser_class: The parser class.
        subclass_mode_model / subclass_mode_data: Take any subclass by class path (``--model=pkg.Net``).
        args: Parse these (a list of command line words, a dict or a Namespace) instead of ``sys.argv``.
        run: True: subcommands ``fit``/``validate``/``test``/``predict`` run the Trainer's method. False: no
            subcommand; ``cli.trainer``, ``cli.model`` and ``cli.datamodule`` are built for the script to use.
        auto_configure_optimizers: Add ``--optimizer`` and ``--lr_scheduler``; when given, they replace the
            module's ``configure_optimizers``.
        load_from_checkpoint_support: A module (data module) calling ``save_hyperparameters()`` records the parsed
            configuration of its arguments, so that ``load_from_checkpoint`` rebuilds class-typed arguments too
            (``module_hparams.py``).

    Example:
        >>> cli = LightningCLI(Net, Data, args=["fit", "--trainer.max_epochs=1"])  # doctest: +SKIP
    """

    def __init__(self, model_class: Any = None, datamodule_class: Any = None,
                 save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
                 save_config_kwargs: dict[str, Any] | None = None, trainer_class: Any = Trainer,
                 trainer_defaults: dict[str, Any] | None = None, seed_everything_default: bool | int = True,
                 parser_kwargs: dict[str, Any] | None = None,
                 parser_class: type[LightningArgumentParser] = LightningArgumentParser,
                 subclass_mode_model: bool = False, subclass_mode_data: bool = False, args: ArgsType = None,
                 run: bool = True, auto_configure_optimizers: bool = True,
                 load_from_checkpoint_support: bool = True) -> None:
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = parser_kwargs or {}
        self.parser_class = parser_class
        self.auto_configure_optimizers = auto_configure_optimizers
        self.load_from_checkpoint_support = load_from_checkpoint_support
        self.model_class, self.datamodule_class = model_class, datamodule_class
        self.model_base = model_class or TrainingModule
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.datamodule_base = datamodule_class or DataModule
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data

        names = self.subcommands()
        main_kwargs = {k: v for k, v in self.parser_kwargs.items() if k not in names}
        subcommand_kwargs = {k: v for k, v in self.parser_kwargs.items() if k in names}
        self.setup_parser(run, main_kwargs, subcommand_kwargs)
        self.parse_arguments(self.parser, args)
        self.subcommand: str | None = self.config["subcommand"] if run else None
        if self.subcommand is not None:
            self.config = config_with_checkpoint_hparams(self.parser, self.config, self.subcommand)
        self._set_seed()
        if load_from_checkpoint_support:
            self._add_instantiators()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # -- the parser ------------------------------------------------------------------------------------------------
    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """A parser with ``-c/--config`` (several allowed: later files win)."""
        kwargs.setdefault("dump_header", [f"stoker=={__version__}"])
        parser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=ActionConfigFile,
                            help="Path to a configuration file in json or yaml format.")
        return parser

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict[str, Any],
                     subparser_kwargs: dict[str, Any]) -> None:
        """Builds ``self.parser``: with a subparser per subcommand, or (``run=False``) with the arguments itself."""
        self.parser = self.init_parser(**main_kwargs)
        self.subcommand_parsers: dict[str, LightningArgumentParser] = {}
        self.subcommand_method_arguments: dict[str, list[str]] = {}
        if add_subcommands:
            self._add_subcommands(self.parser, **subparser_kwargs)
        else:
            self._add_arguments(self.parser)

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Adds ``--seed_everything``."""
        parser.add_argument("--seed_everything", type=Union[bool, int], default=self.seed_everything_default,
                            help="An int: seed_everything with it before the classes are built. True: a seed is "
                                 "chosen (and recorded in the saved config). False: no seeding.")

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Adds the ``trainer``, ``model`` and ``data`` groups."""
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        if isinstance(self.trainer_class, type) and issubclass(self.trainer_class, Trainer):
            for name, default in INERT_DEFAULTS.items():  # Lightning's arguments stoker takes only at these values:
                # a config written by Lightning's --print_config loads unchanged (another value: the Trainer's error)
                kind = Any if default is None else type(default)
                parser.add_argument(f"--trainer.{name}", type=kind, default=default)
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_lightning_class_args(self.model_base, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(self.datamodule_base, "data", subclass_mode=self.subclass_mode_data,
                                        required=self.datamodule_class is not None)  # the module's own loaders

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Override to add arguments (``parser.add_argument``, ``add_lightning_class_args``, ``add_optimizer_args``)
        or links (``parser.link_arguments("data.num_classes", "model.num_classes")``)."""

    def _add_arguments(self, parser: LightningArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not parser.optimizer_groups:  # the user's add_arguments_to_parser may have added its own
                parser.add_optimizer_args((Optimizer,))
            if not parser.lr_scheduler_groups:
                parser.add_lr_scheduler_args(optim.LRSchedulerTypeTuple)
        self.link_optimizers_and_lr_schedulers(parser)

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: LightningArgumentParser) -> None:
        """Links the optimizer and scheduler groups that name a ``link_to`` key to it."""
        parser.link_optimizers_and_lr_schedulers()

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The subcommands (Trainer methods) and the arguments of each that the command line does not take (the
        built objects are passed instead; ``module`` is stoker's name for ``model``)."""
        return {
            "fit": {"model", "module", "train_dataloaders", "val_dataloaders", "datamodule"},
            "validate": {"model", "module", "dataloaders", "datamodule"},
            "test": {"model", "module", "dataloaders", "datamodule"},
            "predict": {"model", "module", "dataloaders", "datamodule"},
        }

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        subcommands = parser.add_subcommands()
        trainer_class = self.trainer_class
        if not isinstance(trainer_class, type):
            trainer_class = class_from_function(trainer_class)
        for name, skip in self.subcommands().items():
            description = _short_description(getattr(trainer_class, name))
            sub_kwargs = dict(kwargs.get(name, {}))
            sub_kwargs.setdefault("description", description)
            sub = self.init_parser(**sub_kwargs)
            self._add_arguments(sub)
            self.subcommand_method_arguments[name] = sub.add_method_arguments(trainer_class, name, skip=set(skip))
            self.subcommand_parsers[name] = sub
            subcommands.add_subcommand(name, sub, help=description)

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Parses ``args`` (or ``sys.argv``) into ``self.config``."""
        if args is not None and len(sys.argv) > 1:
            warnings.warn("LightningCLI's args parameter is intended to run from within Python like if it were from "
                          "the command line. To prevent mistakes it is not recommended to provide both args and "
                          f"command line arguments, got: sys.argv[1:]={sys.argv[1:]}, args={args}.", stacklevel=3)
        if isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    # -- building --------------------------------------------------------------------------------------------------
    def _add_instantiators(self) -> None:
        """The model and data groups built through :class:`ConfigHparams` (their hyperparameters as configured)."""
        for key, base, subclasses in (("model", self.model_base, self.subclass_mode_model),
                                      ("data", self.datamodule_base, self.subclass_mode_data)):
            self.parser.add_instantiator(ConfigHparams(self._config_dump, key), _returned_class(base),
                                         subclasses=subclasses)

    def _config_dump(self) -> dict[str, Any]:
        """The parsed configuration as plain data (the subcommand's section), made once."""
        if not hasattr(self, "config_dump"):
            text = self.parser.dump(self.config, skip_link_targets=False, **KEEP_NONE, format="yaml")
            dump = yaml.safe_load(text)
            self.config_dump = dump[self.subcommand] if self.subcommand else dump
        return self.config_dump

    def before_instantiate_classes(self) -> None:
        """Override to run code after parsing, before the classes are built."""

    def after_instantiate_classes(self) -> None:
        """Override to run code after the classes are built (before the subcommand runs)."""

    def instantiate_classes(self) -> None:
        """Builds the classes (``self.config_init``), then ``self.datamodule``, ``self.model`` and ``self.trainer``."""
        self.config_init = instantiate(self.parser, self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self._add_configure_optimizers_method_to_model(self.subcommand)
        self.trainer = self.instantiate_trainer()

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        """Builds a Trainer from the parsed arguments, ``kwargs`` overriding them (the parsed config stays)."""
        parser = self._parser(self.subcommand)
        extra_callbacks = [self._get(self.config_init, key) for key in parser.callback_keys]
        config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        return self._instantiate_trainer(config, extra_callbacks)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        if "callbacks" not in config:
            name = getattr(self.trainer_class, "__qualname__", repr(self.trainer_class))
            warnings.warn(f"The `{name}` class does not expose the `callbacks` argument so they will not be "
                          "included.", stacklevel=3)
            return self.trainer_class(**config)
        given = config["callbacks"]
        config["callbacks"] = [*([] if given is None else given if isinstance(given, list) else [given]), *callbacks]
        default = self.trainer_defaults.get("callbacks", [])
        config["callbacks"] += [_built(c) for c in (default if isinstance(default, list) else [default])]
        if self.save_config_callback is not None and not config.get("fast_dev_run", False):
            parser = self._parser(self.subcommand)
            section = self.config.get(str(self.subcommand), self.config)
            config["callbacks"].append(self.save_config_callback(parser, section, **self.save_config_kwargs))
        return self.trainer_class(**config)

    def _parser(self, subcommand: str | None) -> LightningArgumentParser:
        return self.parser if subcommand is None else self.subcommand_parsers[subcommand]

    def _get(self, config: Any, key: str, default: Any = None) -> Any:
        """A value of the parsed config, inside the subcommand's section when there is one."""
        section = config.get(self.subcommand, config) if self.subcommand else config
        return section.get(key, default)

    @staticmethod
    def configure_optimizers(lightning_module: Any, optimizer: Optimizer, lr_scheduler: Any = None) -> Any:
        """Override to change what the module's ``configure_optimizers`` returns when ``--optimizer`` (and
        ``--lr_scheduler``) were given (a static method: ``lightning_module`` is the module)."""
        return optim.default_configure_optimizers(lightning_module, optimizer, lr_scheduler)

    def _add_configure_optimizers_method_to_model(self, subcommand: str | None) -> None:
        """Replaces the module's ``configure_optimizers`` with one returning the optimizer (and scheduler) the
        command line named, when one optimizer group (and at most one scheduler group) is ``AUTOMATIC``."""
        if not self.auto_configure_optimizers or self.model is None:
            return
        optimizer_init, scheduler_init = self._automatic_inits(self._parser(subcommand))
        if optimizer_init is None:
            return
        if defines_hook(self.model, "configure_optimizers", TrainingModule):
            warnings.warn(f"`{type(self.model).__name__}.configure_optimizers` will be overridden by "
                          f"`{type(self).__name__}.configure_optimizers`.", UserWarning, stacklevel=2)
        optimizer = optim.instantiate_class(self.model.parameters(), optimizer_init)
        scheduler = optim.instantiate_class(optimizer, scheduler_init) if scheduler_init else None
        method = partial(self.configure_optimizers, optimizer=optimizer, lr_scheduler=scheduler)
        update_wrapper(method, self.configure_optimizers)
        self.model.configure_optimizers = MethodType(method, self.model)

    def _automatic_inits(self, parser: LightningArgumentParser) -> tuple[dict | None, dict | None]:
        optimizers = optim.automatic_keys(parser.optimizer_groups, Optimizer)
        schedulers = optim.automatic_keys(parser.lr_scheduler_groups, optim.LRSchedulerTypeTuple)
        if not optimizers:
            return None, None
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(f"`{type(self).__name__}.add_configure_optimizers_method_to_model` expects at most one "
                             "optimizer and one lr_scheduler to be 'AUTOMATIC', but found "
                             f"{optimizers + schedulers}. Give the others a link_to key and write the module's "
                             "configure_optimizers yourself.")
        groups = parser.optimizer_groups
        optimizer_init = optim.group_init(groups, optimizers[0], self._get(self.config_init, optimizers[0]))
        if not optimizer_init or not schedulers:
            return optimizer_init, None
        value = self._get(self.config_init, schedulers[0])
        return optimizer_init, optim.group_init(parser.lr_scheduler_groups, schedulers[0], value)

    # -- running ---------------------------------------------------------------------------------------------------
    def _run_subcommand(self, subcommand: str) -> None:
        """``before_<subcommand>``, the subcommand (the CLI's own method if it defines one, else the Trainer's),
        ``after_<subcommand>``."""
        before = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        method: Callable[..., Any] = getattr(self, subcommand, getattr(self.trainer, subcommand))
        method(**self._prepare_subcommand_kwargs(subcommand))
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        """The method's arguments: those the command line gave (``ckpt_path``), the model and the data module."""
        given = self.config_init[subcommand]
        kwargs = {k: v for k, v in given.items() if k in self.subcommand_method_arguments[subcommand]}
        kwargs["model"] = self.model
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        return kwargs

    def _set_seed(self) -> None:
        """Seeds with ``--seed_everything`` (True: a seed chosen by ``seed_everything``); records the seed used."""
        seed = self._get(self.config, "seed_everything")
        if seed is False:
            return
        seed = seed_everything(None if seed is True else seed, workers=True)
        (self.config[self.subcommand] if self.subcommand else self.config)["seed_everything"] = seed


def _returned_class(target: Any) -> Any:
    """The class a builder function is annotated to return (a class: itself)."""
    if callable(target) and not isinstance(target, type):
        import inspect

        return inspect.signature(target).return_annotation
    return target


def _built(callback: Any) -> Any:
    """A ``trainer_defaults`` callback given as a class path dict, built; anything else as it is."""
    if isinstance(callback, dict) and "class_path" in callback:
        return optim.instantiate_class((), callback)
    return callback


def _short_description(method: Any) -> str | None:
    """The first sentence of ``method``'s docstring (the subcommand's help)."""
    if not method.__doc__:
        return None
    try:
        import docstring_parser

        return docstring_parser.parse(method.__doc__).short_description
    except (ImportError, ValueError):
        return method.__doc__.strip().split("\n\n")[0]
