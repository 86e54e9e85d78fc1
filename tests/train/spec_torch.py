"""spec_torch.py: a cltrain model spec (cltrain-model(5)) as the torch.nn
module that computes the same function, with the same parameter names and
layouts, so that a cltrain weights file (clt_trainer_save_weights, `cltrain
export`) loads into it with load_state_dict and its state_dict compares
tensor by tensor with cltrain's.

cltrain names layer i (counted from 0 after the input line, blocks
expanded, every act= a layer of its own) as nn.Sequential does: i.weight,
i.bias, i.running_mean... SpecModule is an nn.Sequential of those layers
whose forward also carries what a Sequential cannot: residual (the value
at the start of the block pass or at the last residual), save NAME and
concat NAME (torch.cat([current, saved], dim=1), the U-Net's skip).

  from spec_torch import from_spec
  net, loss_name = from_spec(open("unet.model").read())

The kinds translated are those a surrogate model uses (dense, image,
volume and sequence-of-samples layers, normalisations, activations,
blocks); the transformer kinds (embedding, attention, swiglu, ...) raise
NotImplementedError naming the line, as do tie= and dropout (whose masks
are cltrain's own and cannot be reproduced here).
"""
import torch
import torch.nn as nn

ACTIVATIONS = {"relu", "leakyrelu", "leaky_relu", "gelu", "tanh", "sigmoid", "silu", "swish"}
# the options every kind takes, and what carries no meaning for the function
IGNORED = {"name", "init", "std"}


class Residual(nn.Module):
    """x + the value at the start of the block pass or the last residual;
    residual NAME: x + the value of save NAME."""

    def __init__(self, name=None):
        super().__init__()
        self.tag = name


class Save(nn.Module):
    """An identity layer that names its value (save NAME)."""

    def __init__(self, name):
        super().__init__()
        self.tag = name


class Concat(nn.Module):
    """torch.cat([x, saved NAME], dim=1): channels of (C, ...) samples."""

    def __init__(self, name):
        super().__init__()
        self.tag = name


class GlobalAvgPool(nn.Module):
    """The mean of each channel: (N, C, ...) to (N, C)."""

    def forward(self, x):
        return x.flatten(2).mean(2)


class SpecModule(nn.Sequential):
    """The layers as nn.Sequential names them; plan holds, in order, the
    index of each layer to run and "block" where a block pass starts."""

    def __init__(self, layers, plan):
        super().__init__(*layers)
        self.plan = plan

    def forward(self, x):
        skip, saved = None, {}
        for step in self.plan:
            if step == "block":
                skip = x
                continue
            layer = self[step]
            if isinstance(layer, Residual):
                x = x + (saved[layer.tag] if layer.tag else skip)
                skip = x
            elif isinstance(layer, Save):
                saved[layer.tag] = x
            elif isinstance(layer, Concat):
                x = torch.cat([x, saved[layer.tag]], dim=1)
            else:
                x = layer(x)
        return x


def _number(word, where):
    try:
        v = float(word)
    except ValueError:
        raise ValueError("%s: '%s' is not a number" % (where, word))
    return int(v) if v == int(v) and "." not in word and "e" not in word else v


def _lines(text):
    """(line number, words) of each line that says something, lower case."""
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            yield n, line.lower().split()


def _expand(lines):
    """The lines with blocks expanded: (number, words) and "block" markers."""
    out, stack = [], [[]]
    repeats = []
    for n, words in lines:
        if words[0] == "block":
            opts = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            repeats.append(int(opts.get("repeat", 1)))
            stack.append([])
        elif words[0] == "end":
            body, r = stack.pop(), repeats.pop()
            for _ in range(r):
                stack[-1].append("block")
                stack[-1].extend(body)
        else:
            stack[-1].append((n, words))
    if len(stack) != 1:
        raise ValueError("a block without its end")
    return stack[0]


def _activation(name, opts, slope=None):
    if name == "relu":
        return nn.ReLU()
    if name in ("leakyrelu", "leaky_relu"):
        return nn.LeakyReLU(float(slope if slope is not None else opts.get("slope", 0.01)))
    if name == "gelu":
        return nn.GELU(approximate="tanh")
    if name == "tanh":
        return nn.Tanh()
    if name == "sigmoid":
        return nn.Sigmoid()
    return nn.SiLU()


def _conv(dims, kind, shape, num, opts):
    c = shape[0]
    k = int(opts.get("kernel", 3))
    bias = opts.get("bias", "true") in ("true", "1", "yes")
    args = dict(stride=int(opts.get("stride", 1)), padding=int(opts.get("pad", 0)), bias=bias)
    if kind.startswith("convtranspose"):
        cls = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}[dims]
        args["output_padding"] = int(opts.get("output_pad", 0))
        if "dilation" in opts:
            args["dilation"] = int(opts["dilation"])
        return cls(c, num, k, **args)
    cls = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
    return cls(c, num, k, dilation=int(opts.get("dilation", 1)), **args)


def _pool(dims, kind, num, opts):
    stride = int(opts.get("stride", num))
    if kind.startswith("max"):
        return {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}[dims](num, stride)
    return {1: nn.AvgPool1d, 2: nn.AvgPool2d, 3: nn.AvgPool3d}[dims](num, stride)


CONV_DIMS = {"conv1d": 1, "conv2d": 2, "conv": 2, "conv3d": 3,
             "convtranspose1d": 1, "convtranspose2d": 2, "convtranspose3d": 3}
POOL_DIMS = {"maxpool": 2, "maxpool2d": 2, "avgpool": 2, "avgpool2d": 2, "maxpool1d": 1, "avgpool1d": 1,
             "maxpool3d": 3, "avgpool3d": 3}


def _layer(kind, nums, opts, shape, saved, where):
    """The module of one spec line on a sample of shape `shape`."""
    if kind in ("linear", "dense"):
        if "tie" in opts:
            raise NotImplementedError("%s: tie= is not translated" % where)
        return nn.Linear(shape[-1], int(nums[0]), bias=opts.get("bias", "true") in ("true", "1", "yes"))
    if kind in CONV_DIMS:
        return _conv(CONV_DIMS[kind], kind, shape, int(nums[0]), opts)
    if kind in POOL_DIMS:
        return _pool(POOL_DIMS[kind], kind, int(nums[0]), opts)
    if kind == "globalavgpool":
        return GlobalAvgPool()
    if kind == "flatten":
        return nn.Flatten()
    if kind == "layernorm":
        return nn.LayerNorm(shape[-1], eps=float(opts.get("eps", 1e-5)))
    if kind == "batchnorm":
        cls = {1: nn.BatchNorm1d, 2: nn.BatchNorm1d, 3: nn.BatchNorm2d, 4: nn.BatchNorm3d}[len(shape)]
        return cls(shape[0], eps=float(opts.get("eps", 1e-5)), momentum=float(opts.get("momentum", 0.1)))
    if kind == "groupnorm":
        return nn.GroupNorm(int(nums[0] if nums else opts["groups"]), shape[0], eps=float(opts.get("eps", 1e-5)))
    if kind == "upsample":
        mode = opts.get("mode", "nearest")
        if mode in ("linear", "bilinear", "trilinear"):
            mode = {2: "linear", 3: "bilinear", 4: "trilinear"}[len(shape)]
        scale = _number(opts.get("scale", nums[0] if nums else "2"), where)
        return nn.Upsample(scale_factor=scale, mode=mode, **({} if mode == "nearest" else {"align_corners": False}))
    if kind == "residual":
        name = nums[0] if nums else None
        if name is not None and name not in saved:
            raise ValueError("%s: residual %s: no save %s before it" % (where, name, name))
        return Residual(name)
    if kind in ("save", "concat"):
        name = nums[0] if nums else opts.get("name")
        if name is None:
            raise ValueError("%s: %s needs a name" % (where, kind))
        if kind == "concat" and name not in saved:
            raise ValueError("%s: concat %s: no save %s before it" % (where, name, name))
        return (Save if kind == "save" else Concat)(name)
    if kind in ACTIVATIONS:
        return _activation(kind, opts, nums[0] if nums else None)
    if kind == "dropout":
        raise NotImplementedError("%s: dropout's masks are cltrain's own; not translated" % where)
    raise NotImplementedError("%s: layer kind '%s' is not translated" % (where, kind))


def from_spec(text, name="spec"):
    """(SpecModule, loss) for a spec's text; loss is "crossentropy", "mse",
    "l1" or "huber" (with delta as ("huber", delta))."""
    lines = _expand(_lines(text))
    layers, plan, loss = [], [], "crossentropy"
    shape, saved = None, {}
    probe = None
    for item in lines:
        if item == "block":
            plan.append("block")
            continue
        n, words = item
        where = "%s:%d" % (name, n)
        kind, rest = words[0], words[1:]
        nums = [w for w in rest if "=" not in w]
        opts = dict(w.split("=", 1) for w in rest if "=" in w)
        if kind == "input":
            if nums and nums[0] == "tokens":
                raise NotImplementedError("%s: input tokens is not translated" % where)
            shape = tuple(int(v) for v in nums)
            probe = torch.zeros((2,) + shape)
            continue
        if kind == "loss":
            loss = nums[0]
            if loss == "huber":
                loss = ("huber", float(opts.get("delta", 1.0)))
            continue
        if shape is None:
            raise ValueError("%s: the first line must be input" % where)
        act = opts.pop("act", None)
        for o in IGNORED - ({"name"} if kind == "save" else set()):
            opts.pop(o, None)  # save name=NAME is save NAME
        mods = [_layer(kind, nums, opts, shape, saved, where)]
        if act:
            mods.append(_activation(act, {}))
        for m in mods:
            m.eval()
            with torch.no_grad():  # the shape after it, from a probe through the layer
                if isinstance(m, Save):
                    saved[m.tag] = probe
                elif isinstance(m, Concat):
                    probe = torch.cat([probe, saved[m.tag]], dim=1)
                elif not isinstance(m, Residual):
                    probe = m(probe)
            shape = tuple(probe.shape[1:])
            plan.append(len(layers))
            layers.append(m)
    net = SpecModule(layers, plan)
    net.train()
    return net, loss


def loss_fn(loss):
    """The torch loss of a spec's loss line (reduction 'mean', as cltrain's)."""
    if loss == "mse":
        return nn.MSELoss()
    if loss == "l1":
        return nn.L1Loss()
    if isinstance(loss, tuple):
        return nn.HuberLoss(delta=loss[1])
    return nn.CrossEntropyLoss()


def load_cltrain(net, path):
    """Load a cltrain weights file into net: every tensor of net's
    state_dict must be in it with its shape, except num_batches_tracked
    where cltrain does not keep it; nothing else may be. Returns the
    tensors as loaded (name -> numpy)."""
    from safetensors.numpy import load_file
    w = load_file(path)
    state = net.state_dict()
    extra = sorted(set(w) - set(state))
    missing = sorted(k for k in set(state) - set(w) if not k.endswith("num_batches_tracked"))
    if extra or missing:
        raise ValueError("%s: tensors not in the torch module: %s; missing from the file: %s" % (path, extra, missing))
    for k, v in w.items():
        if tuple(v.shape) != tuple(state[k].shape):
            raise ValueError("%s: %s has shape %s, torch's %s" % (path, k, v.shape, tuple(state[k].shape)))
    net.load_state_dict({k: torch.from_numpy(v.copy()).to(state[k].dtype) for k, v in w.items()}, strict=False)
    return w


if __name__ == "__main__":
    import sys
    net, loss = from_spec(open(sys.argv[1]).read(), sys.argv[1])
    print(net)
    print("loss:", loss)
    for k, v in net.state_dict().items():
        print(k, tuple(v.shape))
