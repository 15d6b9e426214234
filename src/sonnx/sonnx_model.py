"""``SONNXModel``: an imported ONNX model as a trainable :class:`~sonnx.model.Model`.

Subclass it as SINGA's examples do: call ``super().forward(*x)`` (optionally with
``last_layers`` or ``output`` to cut the graph), append your own layers, override
``train_one_batch``, ``set_optimizer`` and ``compile``. Every imported float weight (an
initializer, a Constant node's weight, a weight inside an ``If`` or ``Loop`` body) is a
registered parameter under its ONNX name, so ``get_params``, ``get_states``,
``save_states`` and ``load_states`` include them (``get_params`` after a cut only those the
kept graph reads), and :meth:`SONNXModel.freeze` / :meth:`SONNXModel.unfreeze` choose which of
them train.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sonnx.autograd import softmax_cross_entropy
from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.layer import Layer
from sonnx.model import Model
from sonnx.onnx.model_loading import ModelSource
from sonnx.runtime.rep import SingaRep, prepare
from sonnx.tensor import Tensor

# SINGA's names for the distributed update modes, mapped to DistOpt's methods.
DIST_METHODS = {
    "fp16": "backward_and_update_half",
    "partialUpdate": "backward_and_partial_update",
    "sparseTopK": "backward_and_sparse_update",
    "sparseThreshold": "backward_and_sparse_update",
}


class SONNXModel(Model):
    """A Model whose forward runs an imported ONNX graph (see :func:`sonnx.prepare`).

    :param onnx_model: the ONNX model, as :func:`sonnx.prepare` takes it (ModelProto, path or
        bytes), or a model prepared already (a :class:`~sonnx.SingaRep`, such as
        :func:`sonnx.quantization.prepare_qat` returns), used as it is.
    :param device: where the weights live (None: the default device).
    :raises BadModelError: the model is not valid ONNX.
    :raises UnsupportedOperatorError: the model uses operators sonnx has no converter for.
    """

    def __init__(self, onnx_model: ModelSource | SingaRep, device: Device | None = None) -> None:
        super().__init__()
        if isinstance(onnx_model, SingaRep):
            if device is not None and device != onnx_model.device:
                raise BadInputError(
                    f"SONNXModel: the prepared model lives on {onnx_model.device}, received "
                    f"device={device}; prepare it there instead"
                )
            self._rep = onnx_model
        else:
            self._rep = prepare(onnx_model, device=device)
        # The imported weights the last forward's cut reads (None: it ran the whole graph).
        self._kept_weights: frozenset[str] | None = None

    @property
    def rep(self) -> SingaRep:
        """The prepared graph (``rep.summary()`` lists the layers and their cut values)."""
        return self._rep

    @property
    def _weight_names(self) -> list[str]:
        """The initializers' names, then those of the weights Constant nodes and subgraphs
        hold, read from the graph each time: a pass such as :func:`sonnx.lora.add` may
        prepare the rep again with more weights."""
        names = [i.name for i in self._rep.model.graph.initializer]
        known = set(names)
        return names + [n for n in self._rep.params if n not in known]

    def _imported(self, name: str) -> Tensor:
        found = self._rep.constants.get(name)
        return found if found is not None else self._rep.params[name]

    def _children(self) -> Iterator[tuple[str, Layer | Tensor]]:
        """The user's attributes, then the imported initializers and weights under their ONNX
        names."""
        yield from super()._children()
        for name in self._weight_names:
            yield name, self._imported(name)

    def forward(self, *x: Any, last_layers: int = -1, output: str | None = None) -> list[Tensor]:
        """The imported graph's outputs (a list), or those at a cut: ``last_layers=-k`` drops
        the last k-1 layers, ``output="name"`` stops at that tensor.

        :param x: the graph's inputs, in the order of ``rep.inputs``.
        :param last_layers: as in :meth:`SingaRep.run`.
        :param output: as in :meth:`SingaRep.run`.
        :returns: the outputs as Tensors.
        :raises BadInputError: inputs that do not match the graph's, or a cut naming no layer or
            tensor.
        """
        outputs = self._rep.run(list(x), last_layers=last_layers, output=output)
        if last_layers == -1 and output is None:
            self._kept_weights = None
        else:
            names = tuple(t.name for t in outputs if isinstance(t, Tensor))
            part = self._rep.source.slice(names)
            inner = self._rep.source.inner_weights(part)
            self._kept_weights = frozenset([*part.initializers, *inner])
        return outputs

    def get_params(self) -> dict[str, Tensor]:
        """The trainable parameters by name: the user's layers' and the imported weights, or
        after a cut (the last ``forward`` with ``last_layers`` or ``output``) only the
        imported weights the kept graph reads, which are the ones training updates.

        :returns: the parameters by name.
        """
        params = super().get_params()
        if self._kept_weights is None:
            return params
        cut = {id(t) for n, t in self._rep.params.items() if n not in self._kept_weights}
        return {name: t for name, t in params.items() if id(t) not in cut}

    def train_one_batch(
        self, x: Tensor, y: Tensor, dist_option: str = "fp32", spars: float | None = None
    ) -> tuple[Tensor, Tensor]:
        """Forward, softmax cross-entropy on the first output, then the optimizer step chosen
        by ``dist_option`` (SINGA's five modes; plain optimizers support ``"fp32"``).

        Override it to train another loss or a cut graph with layers of your own.

        :param x: the batch's input.
        :param y: the batch's class labels (int indices, or one-hot / probabilities).
        :param dist_option: ``"fp32"`` (a plain update, or an all-reduce with
            :class:`~sonnx.opt.DistOpt`), or with DistOpt ``"fp16"``, ``"partialUpdate"``,
            ``"sparseTopK"``, ``"sparseThreshold"``.
        :param spars: the sparsification ratio or threshold of the sparse modes (None: DistOpt's
            default).
        :returns: the model's first output and the loss.
        :raises BadInputError: no optimizer was set, an unknown ``dist_option``, or a
            distributed mode with an optimizer that is not a DistOpt.
        """
        if self.optimizer is None:
            raise BadInputError(
                f"{type(self).__name__}.train_one_batch: no optimizer; call "
                "model.set_optimizer(...) first"
            )
        out = self.forward(x)
        out = out[0] if isinstance(out, list) else out
        loss = softmax_cross_entropy(out, y)
        apply_update(self.optimizer, loss, dist_option, spars)
        return out, loss

    def _matching(self, patterns: tuple[str, ...], what: str) -> list[Tensor]:
        params = self._rep.params
        chosen = []
        for pattern in patterns:
            # An exact name means that parameter alone; anything else is a prefix.
            names = [pattern] if pattern in params else [n for n in params if n.startswith(pattern)]
            chosen.extend(params[n] for n in names if all(params[n] is not c for c in chosen))
        if not chosen:
            raise BadInputError(
                f"{type(self).__name__}.{what}: no imported parameter matches {list(patterns)}; "
                f"parameters are e.g. {list(params)[:5]}"
            )
        return chosen

    def freeze(self, *names_or_prefixes: str) -> int:
        """Stop training imported parameters; returns how many.

        Each argument is a parameter's name (that parameter only) or else a name prefix
        (``"features."``); no argument means every imported parameter. A
        BatchNormalization whose scale and bias are both frozen runs in inference mode from
        then on, in training too, as a torch backbone after ``.eval()``: it normalises with
        its running statistics and leaves them as they are (:meth:`unfreeze` gives it back
        its batch statistics).

        :param names_or_prefixes: parameter names or name prefixes.
        :returns: how many parameters were frozen.
        :raises BadInputError: no imported parameter matches.
        """
        chosen = self._matching(names_or_prefixes or ("",), "freeze")
        for t in chosen:
            t.requires_grad = False
        return len(chosen)

    def unfreeze(self, *names_or_prefixes: str) -> int:
        """Train the imported parameters named (or prefixed) so again; returns how many.

        :param names_or_prefixes: parameter names or name prefixes, as :meth:`freeze` takes
            them; none means every imported parameter.
        :returns: how many parameters were unfrozen.
        :raises BadInputError: no imported parameter matches.
        """
        chosen = self._matching(names_or_prefixes or ("",), "unfreeze")
        for t in chosen:
            t.requires_grad = True
        return len(chosen)


def apply_update(
    optimizer: Any, loss: Tensor, dist_option: str = "fp32", spars: float | None = None
) -> None:
    """Backward and update with SINGA's ``dist_option`` names: ``fp32`` (plain all-reduce or
    local), ``fp16``, ``partialUpdate``, ``sparseTopK``, ``sparseThreshold``.

    :param optimizer: an :class:`~sonnx.opt.Optimizer`, or a :class:`~sonnx.opt.DistOpt` for
        every option but ``fp32``.
    :param loss: the loss, a scalar Tensor computed in training mode.
    :param dist_option: the update mode, one of the names above.
    :param spars: the sparse modes' ratio or threshold (None: DistOpt's default).
    :raises BadInputError: an unknown ``dist_option``, or one that needs a DistOpt without one.
    """
    if dist_option == "fp32":
        optimizer(loss)
        return
    method = DIST_METHODS.get(dist_option)
    if method is None:
        raise BadInputError(
            f"dist_option must be one of {['fp32', *DIST_METHODS]}, received {dist_option!r}"
        )
    if not hasattr(optimizer, method):
        raise BadInputError(
            f"dist_option {dist_option!r} needs a distributed optimizer (opt.DistOpt); "
            f"received {type(optimizer).__name__}"
        )
    if dist_option.startswith("sparse"):
        kwargs = {"topK": dist_option == "sparseTopK"}
        if spars is not None:
            kwargs["spars"] = spars
        getattr(optimizer, method)(loss, **kwargs)
    else:
        getattr(optimizer, method)(loss)
