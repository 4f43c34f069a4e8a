#!/usr/bin/env python3
"""PyTorch models for asgd: script a module into the TorchScript file asgd trains, and
evaluate the file a run writes back.

  asgd_torch.py script --arch mlp|cnn|softmax|resnet20 [architecture flags]
                       --input-shape 1,28,28 --classes 10 [--seed 1] [--trace] --out FILE.pt
  asgd_torch.py script --module path/to/file.py:factory [--factory-args JSON]
                       --input-shape 1,28,28 --classes 10 [--trace] --out FILE.pt
  asgd_torch.py evaluate FILE.pt --data-dir DIR --dataset mnist|fashion-mnist|cifar10
                       [--split test|train] [--limit N] [--mean m,.. --std s,..]

The shipped architectures match asgd's own Eigen models (models/architecture.h): the same
layer sizes, padding, pooling, flatten order, initialisation rule (He normal for a layer
that a ReLU follows, Glorot uniform otherwise and for the output layer, zero biases) and
tensor names (fc1.weight, conv1.weight, ...). PyTorch stores a Linear weight as
[out, in], the transpose of asgd's [in, out]; a convolution's weight has the same
[out_c, in_c, kh, kw] layout in both. Initial values come from torch's generator seeded
with --seed, so they are not bit-equal to asgd's.

Errors (bad flags, a module that does not map the input shape to one float32 logit per
class, unreadable data) print one line on stderr and exit with status 2.

The functions and classes here are importable (put this folder on sys.path):
build_model(), check_module(), script_module(), load_idx(), load_cifar10(), evaluate().
"""

import argparse
import gzip
import importlib.util
import json
import os
import sys
from collections import OrderedDict

PROG = "asgd_torch.py"
ARCHES = ("mlp", "cnn", "softmax", "resnet20")
ACTIVATIONS = ("relu", "tanh", "sigmoid")
DATASETS = ("mnist", "fashion-mnist", "cifar10")
CHECK_BATCH = 2  # examples in the batch the checks run forward on


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _first_line(exc):
    """The first non-empty line of an exception's text (torch's messages span many); for
    an error inside TorchScript, the last line, which holds the error itself."""
    lines = str(exc).splitlines()
    if lines and lines[0].startswith("The following operation failed in the TorchScript"):
        lines.reverse()
    for line in lines:
        line = line.strip().rstrip(":").strip()
        if line:
            return line if len(line) <= 300 else line[:297] + "..."
    return type(exc).__name__


try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError as _torch_error:  # pragma: no cover - depends on the machine
    torch = None
    _TORCH_ERROR = _torch_error

    class nn:  # noqa: N801 - a stand-in so the class definitions below still parse
        Module = object
        Sequential = object
else:
    _TORCH_ERROR = None


# ---- Models ---------------------------------------------------------------------------


def _activation(name):
    return {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[name]()


def _init_like_asgd(layer, relu_follows):
    """asgd's rule: He normal (std sqrt(2 / fan_in)) when a ReLU follows the layer, Glorot
    uniform (a = sqrt(6 / (fan_in + fan_out))) otherwise; biases zero. torch's fans for a
    Linear [out, in] and a Conv2d [o, c, kh, kw] are asgd's (in, out) and (c·kh·kw, o·kh·kw)."""
    with torch.no_grad():
        if relu_follows:
            nn.init.kaiming_normal_(layer.weight, mode="fan_in", nonlinearity="relu")
        else:
            nn.init.xavier_uniform_(layer.weight, gain=1.0)
        if layer.bias is not None:
            layer.bias.zero_()


def _dense_stack(layers, inputs, hidden, activation, classes):
    """Appends fc1 … fcK (each followed by the activation) and fc(K+1) → classes."""
    width = inputs
    index = 1
    for units in hidden:
        fc = nn.Linear(width, units)
        _init_like_asgd(fc, activation == "relu")
        layers["fc%d" % index] = fc
        layers["%s%d" % (activation, index)] = _activation(activation)
        width = units
        index += 1
    fc = nn.Linear(width, classes)
    _init_like_asgd(fc, relu_follows=False)
    layers["fc%d" % index] = fc


class Mlp(nn.Sequential):
    """asgd's mlp (hidden non-empty) and softmax (hidden empty): flatten, then fc1 …
    fcK with the activation after each, then fc(K+1) to the logits. Parameters are named
    fc1.weight, fc1.bias, … in forward order, as asgd's layout."""

    def __init__(self, input_shape, hidden, activation, classes):
        inputs = 1
        for d in input_shape:
            inputs *= d
        layers = OrderedDict()
        layers["flatten"] = nn.Flatten(1)
        _dense_stack(layers, inputs, list(hidden), activation, classes)
        super().__init__(layers)


def cnn_problem(input_shape, channels, kernel):
    """asgd's CnnArchitectureProblem: the reason the architecture is ill-formed, or ""."""
    if len(input_shape) != 3:
        return "the cnn takes images: --input-shape must be channels,height,width"
    if min(input_shape) <= 0:
        return "empty input image"
    if not channels:
        return "no convolution block"
    if kernel <= 0 or kernel % 2 == 0:
        return "the kernel size must be odd and positive"
    h, w = input_shape[1], input_shape[2]
    for b, c in enumerate(channels):
        if c <= 0:
            return "a convolution has no output channels"
        if b > 0:
            h -= kernel - 1
            w -= kernel - 1
        h //= 2
        w //= 2
        if h <= 0 or w <= 0:
            return "the image shrinks to nothing in convolution block %d" % (b + 1)
    return ""


class Cnn(nn.Sequential):
    """asgd's LeNet-5-style cnn. Block n: convN (kernel × kernel, stride 1; block 1 with
    'same' zero padding kernel // 2, later blocks none) → activation → 2×2 max-pool,
    stride 2, floor. Then the last block's output flattened in (channel, row, column)
    order, as asgd's Eigen cnn does, and fc1 … fcM with the activation, fc(M+1) → logits.
    On 1×28×28 with the defaults: 61706 parameters, as asgd's."""

    def __init__(self, input_shape, channels, fc, kernel, activation, classes):
        problem = cnn_problem(input_shape, channels, kernel)
        if problem:
            raise UsageError("--cnn-channels/--cnn-kernel/--input-shape: %s" % problem)
        layers = OrderedDict()
        c, h, w = input_shape
        for b, out in enumerate(channels):
            pad = kernel // 2 if b == 0 else 0
            conv = nn.Conv2d(c, out, kernel, stride=1, padding=pad)
            _init_like_asgd(conv, activation == "relu")
            layers["conv%d" % (b + 1)] = conv
            layers["conv%d_%s" % (b + 1, activation)] = _activation(activation)
            layers["pool%d" % (b + 1)] = nn.MaxPool2d(2, stride=2)
            h = (h + 2 * pad - kernel + 1) // 2
            w = (w + 2 * pad - kernel + 1) // 2
            c = out
        layers["flatten"] = nn.Flatten(1)
        _dense_stack(layers, c * h * w, list(fc), activation, classes)
        super().__init__(layers)


class ShortcutA(nn.Module):
    """He et al. 2016's option A: the identity, subsampled by stride 2 and zero-padded
    with `pad` channels on each side (no parameters)."""

    def __init__(self, pad):
        super().__init__()
        self.pad = pad

    def forward(self, x):
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))


class BasicBlock(nn.Module):
    """conv3×3 → BN → ReLU → conv3×3 → BN, plus the shortcut, → ReLU."""

    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        if stride != 1 or in_planes != planes:
            # The CIFAR ResNets double the channels exactly where they halve the size.
            self.shortcut = ShortcutA((planes - in_planes) // 2)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    """He et al. 2016 (sec. 4.2) CIFAR ResNet-(6n+2): conv3×3 16 → BN → ReLU, three
    stages of n basic blocks with 16, 32, 64 channels (the 2nd and 3rd start with stride
    2, option-A shortcuts), global average pool, fc → logits. n = 3 is ResNet-20: 269722
    parameters on 3×32×32 with 10 classes, 269434 on 1×28×28 (the first convolution has
    one input channel). Any C×H×W input works (the pool averages whatever is left).
    Initialisation: He normal (fan_in) for every convolution and the fc weight, BatchNorm
    γ = 1, β = 0, fc bias 0. Holds BatchNorm buffers (running_mean, running_var,
    num_batches_tracked) besides its parameters."""

    def __init__(self, input_shape, classes, blocks_per_stage=3):
        super().__init__()
        if len(input_shape) != 3 or min(input_shape) <= 0:
            raise UsageError("--input-shape: resnet20 takes images: expected "
                             "channels,height,width, each > 0")
        self.conv1 = nn.Conv2d(input_shape[0], 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        stages = []
        in_planes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for i in range(blocks_per_stage):
                blocks.append(BasicBlock(in_planes, planes, stride if i == 0 else 1))
                in_planes = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(64, classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = out.mean(dim=(2, 3))
        return self.fc(out)


def build_model(arch, input_shape, classes, hidden=(256, 256), activation="relu",
                cnn_channels=(6, 16), cnn_fc=(120, 84), cnn_kernel=5, seed=1):
    """One of the shipped architectures, initialised from torch's generator seeded with
    `seed`. Raises UsageError for options that do not fit."""
    _require_torch()
    if activation not in ACTIVATIONS:
        raise UsageError("--activation '%s': expected one of %s"
                         % (activation, ", ".join(ACTIVATIONS)))
    if classes < 2:
        raise UsageError("--classes %d: expected at least 2" % classes)
    torch.manual_seed(seed)
    if arch == "mlp":
        if not hidden:
            raise UsageError("--hidden: the mlp needs at least one hidden layer "
                             "(use --arch softmax for none)")
        return Mlp(input_shape, hidden, activation, classes)
    if arch == "softmax":
        return Mlp(input_shape, [], activation, classes)
    if arch == "cnn":
        return Cnn(input_shape, list(cnn_channels), list(cnn_fc), cnn_kernel, activation, classes)
    if arch == "resnet20":
        return ResNetCifar(input_shape, classes, blocks_per_stage=3)
    raise UsageError("--arch '%s': expected one of %s" % (arch, ", ".join(ARCHES)))


# ---- Checks and scripting -------------------------------------------------------------


def _shape_text(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def check_module(module, input_shape, classes, what="the module"):
    """Checks what asgd needs of a model, before it is written: at least one parameter,
    every parameter float32, and forward on a float32 batch [B, *input_shape] returning
    float32 logits [B, classes], in eval() mode and in train() mode (the buffers, e.g.
    BatchNorm's running statistics, are restored after the train-mode pass; the module
    is left in train() mode). Raises UsageError with one line otherwise."""
    params = list(module.named_parameters())
    if not params:
        raise UsageError("%s has no parameters: expected at least one float32 parameter to train"
                         % what)
    for name, p in params:
        if p.dtype != torch.float32:
            raise UsageError("%s: parameter '%s' is %s: expected float32 "
                             "(call .float() on the module)"
                             % (what, name, str(p.dtype).replace("torch.", "")))
    batch_shape = [CHECK_BATCH] + list(input_shape)
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(batch_shape, generator=generator, dtype=torch.float32)
    saved = [b.detach().clone() for b in module.buffers()]
    try:
        for mode in ("eval", "train"):
            module.train(mode == "train")
            try:
                with torch.no_grad():
                    out = module(x)
            except Exception as e:  # noqa: BLE001 - any failure of the user's forward
                raise UsageError("%s: forward fails in %s() mode on a float32 batch of shape %s: %s"
                                 % (what, mode, _shape_text(batch_shape), _first_line(e)))
            if not isinstance(out, torch.Tensor):
                raise UsageError("%s: forward returns %s in %s() mode: expected a float32 tensor %s"
                                 % (what, type(out).__name__, mode,
                                    _shape_text([CHECK_BATCH, classes])))
            if list(out.shape) != [CHECK_BATCH, classes] or out.dtype != torch.float32:
                raise UsageError("%s: forward maps a batch of shape %s to %s %s in %s() mode: "
                                 "expected float32 %s (one logit per class)"
                                 % (what, _shape_text(batch_shape),
                                    str(out.dtype).replace("torch.", ""),
                                    _shape_text(out.shape), mode,
                                    _shape_text([CHECK_BATCH, classes])))
    finally:
        with torch.no_grad():
            for b, s in zip(module.buffers(), saved):
                b.copy_(s)
        module.train(True)


def script_module(module, input_shape, classes, trace=False, what="the module"):
    """Checks the module, turns it into TorchScript (torch.jit.script, or torch.jit.trace
    on a batch of the input shape) and checks the result again. Returns the script module.
    Tracing records one path through forward: train/eval differences (dropout,
    BatchNorm) and data-dependent control flow are frozen as traced, in train() mode."""
    if not isinstance(module, nn.Module):
        raise UsageError("%s is %s: expected a torch.nn.Module" % (what, type(module).__name__))
    check_module(module, input_shape, classes, what)
    module.train(True)
    if trace:
        frozen = sorted({type(m).__name__ for m in module.modules()
                         if isinstance(m, (nn.modules.batchnorm._BatchNorm,
                                           nn.modules.dropout._DropoutNd))})
        if frozen:
            print("%s: note: %s: tracing freezes %s in train() mode, so asgd's evaluations "
                  "will use it as in training too; script it instead (without --trace)"
                  % (PROG, what, ", ".join(frozen)), file=sys.stderr)
    try:
        if trace:
            example = torch.rand([CHECK_BATCH] + list(input_shape),
                                 generator=torch.Generator().manual_seed(0))
            saved = [b.detach().clone() for b in module.buffers()]
            with torch.no_grad():
                scripted = torch.jit.trace(module, example, check_trace=False)
                for b, s in zip(module.buffers(), saved):
                    b.copy_(s)
                for b, s in zip(scripted.buffers(), saved):
                    b.copy_(s)
        else:
            scripted = torch.jit.script(module)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - torch.jit raises many kinds
        raise UsageError("%s: torch.jit.%s fails: %s%s"
                         % (what, "trace" if trace else "script", _first_line(e),
                            "" if trace else " (--trace may work)"))
    check_module(scripted, input_shape, classes, what="%s, scripted," % what)
    return scripted


def load_factory(spec, factory_args):
    """Calls `factory` of path/to/file.py:factory with the JSON arguments (an object:
    keyword arguments; an array: positional ones; absent: none) and returns its result."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise UsageError("--module '%s': expected path/to/file.py:factory" % spec)
    if not os.path.isfile(path):
        raise UsageError("--module %s: no such file: expected a Python file" % path)
    args, kwargs = [], {}
    if factory_args is not None:
        try:
            parsed = json.loads(factory_args)
        except ValueError as e:
            raise UsageError("--factory-args '%s': %s: expected a JSON object or array"
                             % (factory_args, e))
        if isinstance(parsed, dict):
            kwargs = parsed
        elif isinstance(parsed, list):
            args = parsed
        else:
            raise UsageError("--factory-args '%s': expected a JSON object (keyword arguments) "
                             "or array (positional arguments)" % factory_args)
    module_name = "asgd_user_model_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    # The file may import its neighbours, as when run from its own folder.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError("not a Python file")
        user = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = user  # torch.jit.script looks classes up by module
        loader_spec.loader.exec_module(user)
    except Exception as e:  # noqa: BLE001 - whatever the user's file raises
        raise UsageError("--module %s: importing it fails: %s" % (path, _first_line(e)))
    factory = getattr(user, name, None)
    if factory is None or not callable(factory):
        raise UsageError("--module %s: has no function '%s': "
                         "expected a factory returning an nn.Module"
                         % (path, name))
    try:
        return factory(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise UsageError("--module %s: %s(...) fails: %s" % (path, name, _first_line(e)))


# ---- Data -----------------------------------------------------------------------------

IDX_FILES = {
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
}
CIFAR_FILES = {
    "test": ["test_batch.bin"],
    "train": ["data_batch_%d.bin" % i for i in range(1, 6)],
}
CIFAR_RECORD = 1 + 3 * 32 * 32


def _scale_table():
    """float32(v) / 255.0f for every byte v, as asgd's IDX loader (and CIFAR reader)."""
    import numpy as np
    return np.arange(256, dtype=np.float32) / np.float32(255.0)


def _find_file(dirs, name):
    """NAME.gz, then NAME, in the first folder of `dirs` holding either (asgd's rule)."""
    for d in dirs:
        for candidate in (os.path.join(d, name + ".gz"), os.path.join(d, name)):
            if os.path.isfile(candidate):
                return candidate
    return None


def _read_bytes(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        with open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError) as e:
        raise UsageError("%s: cannot read it: %s" % (path, _first_line(e)))


def _idx_header(data, path, magic, ndims, what):
    if len(data) < 4 + 4 * ndims:
        raise UsageError("%s: %d bytes: expected an IDX %s file (a header of %d bytes)"
                         % (path, len(data), what, 4 + 4 * ndims))
    found = int.from_bytes(data[0:4], "big")
    if found != magic:
        raise UsageError("%s: expected IDX magic %d (%s), found %d" % (path, magic, what, found))
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    count = 1
    for d in dims:
        count *= d
    if len(data) != 4 + 4 * ndims + count:
        raise UsageError("%s: %d bytes: expected %d (header and %s of shape %s)"
                         % (path, len(data), 4 + 4 * ndims + count, what, "x".join(map(str, dims))))
    return dims


def load_idx(images_path, labels_path, classes=10, limit=None):
    """IDX images (magic 2051) and labels (2049), gzip or not: float32 [N, 1, rows, cols]
    in [0, 1] (v / 255, as asgd) and int64 labels [N]."""
    import numpy as np
    images = _read_bytes(images_path)
    labels = _read_bytes(labels_path)
    n, rows, cols = _idx_header(images, images_path, 2051, 3, "images")
    (m,) = _idx_header(labels, labels_path, 2049, 1, "labels")
    if n != m:
        raise UsageError("%s: has %d labels but %s has %d images: expected one label per image"
                         % (labels_path, m, images_path, n))
    y = np.frombuffer(labels, dtype=np.uint8, offset=8).astype(np.int64)
    if y.size and y.max() >= classes:
        bad = int(np.argmax(y >= classes))
        raise UsageError("%s: label %d of example %d: expected a class below %d"
                         % (labels_path, y[bad], bad, classes))
    if limit is not None:
        n = min(n, limit)
    pixels = np.frombuffer(images, dtype=np.uint8, offset=16, count=n * rows * cols)
    x = _scale_table()[pixels].reshape(n, 1, rows, cols)
    return torch.from_numpy(x), torch.from_numpy(y[:n].copy())


def load_cifar10(paths, limit=None):
    """CIFAR-10 binary files (records of one label byte then 3,072 pixel bytes: 1,024 red,
    1,024 green, 1,024 blue, rows top to bottom), concatenated in order: float32
    [N, 3, 32, 32] in [0, 1] (v / 255) and int64 labels [N]."""
    import numpy as np
    xs, ys = [], []
    total = 0
    for path in paths:
        if limit is not None and total >= limit:
            break
        data = _read_bytes(path)
        if len(data) == 0 or len(data) % CIFAR_RECORD != 0:
            raise UsageError("%s: %d bytes: expected a multiple of %d (one label byte and 3072 "
                             "pixel bytes per image; 30730000 for the real files)"
                             % (path, len(data), CIFAR_RECORD))
        records = np.frombuffer(data, dtype=np.uint8).reshape(-1, CIFAR_RECORD)
        if limit is not None:
            records = records[:limit - total]
        y = records[:, 0].astype(np.int64)
        if y.size and y.max() >= 10:
            bad = int(np.argmax(y >= 10))
            raise UsageError("%s: label %d of image %d: expected a class below 10"
                             % (path, y[bad], bad))
        xs.append(_scale_table()[records[:, 1:]].reshape(-1, 3, 32, 32))
        ys.append(y)
        total += len(y)
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


def load_dataset(data_dir, dataset, split, limit=None):
    """The split of a dataset under data_dir: the files are looked for in data_dir/NAME/
    (asgd's layout), then in data_dir itself; for cifar10 also in a cifar-10-batches-bin/
    folder of either (as the archive unpacks)."""
    if not os.path.isdir(data_dir):
        raise UsageError("--data-dir %s: no such directory" % data_dir)
    dirs = [os.path.join(data_dir, dataset), data_dir]
    if dataset in ("mnist", "fashion-mnist"):
        image_name, label_name = IDX_FILES[split]
        images, labels = _find_file(dirs, image_name), _find_file(dirs, label_name)
        if images is None or labels is None:
            missing = image_name if images is None else label_name
            raise UsageError("--data-dir %s: %s[.gz] not found in %s: expected the %s %s files"
                             % (data_dir, missing, " or ".join(dirs), dataset, split))
        return load_idx(images, labels, classes=10, limit=limit)
    if dataset == "cifar10":
        dirs = [os.path.join(d, "cifar-10-batches-bin") for d in dirs] + dirs
        paths = []
        for name in CIFAR_FILES[split]:
            found = None
            for d in dirs:
                if os.path.isfile(os.path.join(d, name)):
                    found = os.path.join(d, name)
                    break
            if found is None:
                raise UsageError("--data-dir %s: %s not found in %s: expected the CIFAR-10 "
                                 "binary version" % (data_dir, name, " or ".join(dirs)))
            paths.append(found)
        return load_cifar10(paths, limit=limit)
    raise UsageError("--dataset '%s': expected one of %s" % (dataset, ", ".join(DATASETS)))


# ---- Evaluation -----------------------------------------------------------------------


def evaluate(module, x, y, mean=None, std=None, batch_size=256):
    """Accuracy (the first arg-max of the logits equals the label, as asgd counts) and
    mean cross-entropy of the module on (x, y), in eval() mode, without gradients.
    mean/std: per-channel normalisation (x − mean) / std, or None. Returns
    (accuracy, loss, examples)."""
    if mean is not None:
        shape = [1, -1] + [1] * (x.dim() - 2)
        m = torch.tensor(mean, dtype=torch.float32).view(shape)
        s = torch.tensor(std, dtype=torch.float32).view(shape)
        x = (x - m) / s
    module.eval()
    n = x.shape[0]
    correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for start in range(0, n, batch_size):
            xb, yb = x[start:start + batch_size], y[start:start + batch_size]
            logits = module(xb)
            if (not isinstance(logits, torch.Tensor) or logits.dim() != 2
                    or logits.shape[0] != xb.shape[0]):
                raise UsageError("the module maps a batch of shape %s to %s: "
                                 "expected logits [B, classes]"
                                 % (_shape_text(xb.shape),
                                    _shape_text(logits.shape) if isinstance(logits, torch.Tensor)
                                    else type(logits).__name__))
            if int(yb.max()) >= logits.shape[1]:
                raise UsageError("the module returns %d logits per example: expected at least %d "
                                 "(the dataset's classes)" % (logits.shape[1], int(yb.max()) + 1))
            logits = logits.float()
            correct += int((logits.argmax(dim=1) == yb).sum())
            loss_sum += float(F.cross_entropy(logits, yb, reduction="none").double().sum())
    if n == 0:
        return 0.0, 0.0, 0
    return correct / n, loss_sum / n, n


# ---- Command line ---------------------------------------------------------------------


def _require_torch():
    if torch is None:
        raise UsageError("cannot import torch (%s): expected PyTorch for this Python "
                         "(Debian's python3-torch; run it with /usr/bin/python3)"
                         % _first_line(_TORCH_ERROR))


def _int_list(flag, text, allow_empty=False):
    text = text.strip()
    if text == "" and allow_empty:
        return []
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = None
    if not values or any(v <= 0 for v in values):
        raise UsageError("%s '%s': expected a comma-separated list of positive integers"
                         % (flag, text))
    return values


def _float_list(flag, text):
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise UsageError("%s '%s': expected a comma-separated list of numbers" % (flag, text))


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2)."""

    def error(self, message):
        raise UsageError("%s (see %s --help)" % (message, self.prog))


def make_parser():
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="{script,evaluate}", parser_class=_Parser)
    sub.required = True

    s = sub.add_parser(
        "script", help="write a TorchScript file asgd can train (model.name = torchscript)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Builds one of asgd's architectures (--arch) or your own module (--module),\n"
        "checks that forward maps a float32 batch [B, *input-shape] to float32 logits\n"
        "[B, classes] in eval() and train() mode, that it has parameters and that all are\n"
        "float32, then writes it with torch.jit.script (or --trace). asgd trains the\n"
        "parameters in named_parameters() order, starting from the values in the file.\n"
        "A module that does not pass: one line on stderr, exit status 2, no file written.",
        epilog="examples:\n"
        "  %(prog)s --arch mlp --hidden 256,256 --input-shape 1,28,28 --classes 10 --out mlp.pt\n"
        "  %(prog)s --arch resnet20 --input-shape 3,32,32 --classes 10 --out resnet20.pt\n"
        "  %(prog)s --module my_model.py:make --factory-args '{\"width\": 64}' \\\n"
        "      --input-shape 1,28,28 --classes 10 --out mine.pt")
    what = s.add_mutually_exclusive_group(required=True)
    what.add_argument("--arch", choices=ARCHES,
                      help="one of asgd's models: mlp, cnn, softmax (one linear layer) or "
                      "resnet20 (He et al. 2016's CIFAR ResNet-20, BatchNorm, option-A shortcuts)")
    what.add_argument("--module", metavar="FILE.py:FACTORY",
                      help="your own model: FACTORY(...) in FILE.py returns the nn.Module")
    s.add_argument("--factory-args", metavar="JSON",
                   help="arguments for FACTORY: a JSON object (keywords) or array (positional)")
    s.add_argument("--hidden", default="256,256", metavar="N,N,..",
                   help="mlp: hidden layer sizes (default 256,256)")
    s.add_argument("--activation", default="relu", choices=ACTIVATIONS,
                   help="mlp and cnn: nonlinearity, which also picks the initialisation: He "
                   "normal for relu, Glorot uniform otherwise (default relu)")
    s.add_argument("--cnn-channels", default="6,16", metavar="N,N,..",
                   help="cnn: output channels per convolution block (default 6,16)")
    s.add_argument("--cnn-fc", default="120,84", metavar="N,..",
                   help="cnn: fully connected hidden layers, may be empty (default 120,84)")
    s.add_argument("--cnn-kernel", default=5, type=int, metavar="K",
                   help="cnn: odd kernel side (default 5)")
    s.add_argument("--input-shape", required=True, metavar="C,H,W",
                   help="shape of one example as asgd's dataset gives it: 1,28,28 for "
                   "MNIST and Fashion-MNIST, 3,32,32 for CIFAR-10")
    s.add_argument("--classes", required=True, type=int, help="number of classes (logits)")
    s.add_argument("--seed", default=1, type=int,
                   help="torch's seed (torch.manual_seed) before building the module: the "
                   "initial values of --arch, and of --module if its factory draws from "
                   "torch's generator (default 1)")
    s.add_argument("--trace", action="store_true",
                   help="torch.jit.trace instead of torch.jit.script (records one path "
                   "through forward, in train() mode: do not trace BatchNorm or dropout)")
    s.add_argument("--out", required=True, metavar="FILE.pt", help="the TorchScript file to write")

    e = sub.add_parser(
        "evaluate", help="accuracy and loss of a TorchScript file (e.g. a run's final_model.pt)",
        description="Loads FILE.pt with torch.jit.load and prints one line "
        "'accuracy A loss L examples N' (A: fraction of examples whose first arg-max logit is "
        "the label; L: mean cross-entropy), in eval() mode. Pixels are scaled by 1/255 as asgd "
        "loads them.")
    e.add_argument("model", metavar="FILE.pt", help="a TorchScript file")
    e.add_argument("--data-dir", required=True, metavar="DIR",
                   help="folder holding DATASET/ (asgd's data folder) or the dataset's files: "
                   "IDX files (.gz or not) for mnist and fashion-mnist; for cifar10 "
                   "data_batch_1..5.bin and test_batch.bin, also in cifar-10-batches-bin/")
    e.add_argument("--dataset", required=True, choices=DATASETS)
    e.add_argument("--split", default="test", choices=("test", "train"),
                   help="default test")
    e.add_argument("--limit", type=int, metavar="N", help="only the first N examples")
    e.add_argument("--mean", metavar="m,..", help="per-channel mean to subtract (with --std)")
    e.add_argument("--std", metavar="s,..", help="per-channel standard deviation to divide by")
    e.add_argument("--batch-size", type=int, default=256, help="examples per forward (default 256)")
    return parser


def cmd_script(args):
    input_shape = _int_list("--input-shape", args.input_shape)
    if args.arch:
        module = build_model(
            args.arch, input_shape, args.classes,
            hidden=_int_list("--hidden", args.hidden),
            activation=args.activation,
            cnn_channels=_int_list("--cnn-channels", args.cnn_channels),
            cnn_fc=_int_list("--cnn-fc", args.cnn_fc, allow_empty=True),
            cnn_kernel=args.cnn_kernel, seed=args.seed)
    else:
        if args.classes < 2:
            raise UsageError("--classes %d: expected at least 2" % args.classes)
        torch.manual_seed(args.seed)
        module = load_factory(args.module, args.factory_args)
    what = "--arch " + args.arch if args.arch else "--module " + args.module
    scripted = script_module(module, input_shape, args.classes, trace=args.trace, what=what)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise UsageError("--out %s: no folder %s to write it in" % (args.out, out_dir))
    try:
        tmp = args.out + ".tmp"
        torch.jit.save(scripted, tmp)
        os.replace(tmp, args.out)
    except Exception as e:  # noqa: BLE001
        raise UsageError("--out %s: cannot write it: %s" % (args.out, _first_line(e)))
    count = sum(p.numel() for p in scripted.parameters())
    print("wrote %s: %s, %d parameters, input %s, %d classes"
          % (args.out, args.arch or args.module, count, "x".join(map(str, input_shape)),
             args.classes))
    return 0


def cmd_evaluate(args):
    if args.limit is not None and args.limit <= 0:
        raise UsageError("--limit %d: expected a positive number of examples" % args.limit)
    if args.batch_size <= 0:
        raise UsageError("--batch-size %d: expected a positive number" % args.batch_size)
    if (args.mean is None) != (args.std is None):
        raise UsageError("--mean and --std: expected both or neither")
    if not os.path.isfile(args.model):
        raise UsageError("%s: no such file: expected a TorchScript model" % args.model)
    try:
        module = torch.jit.load(args.model, map_location="cpu")
    except Exception as e:  # noqa: BLE001
        raise UsageError("%s: torch.jit.load fails: %s: expected a TorchScript file"
                         % (args.model, _first_line(e)))
    x, y = load_dataset(args.data_dir, args.dataset, args.split, args.limit)
    mean = std = None
    if args.mean is not None:
        mean, std = _float_list("--mean", args.mean), _float_list("--std", args.std)
        channels = x.shape[1]
        if len(mean) != channels or len(std) != channels:
            raise UsageError("--mean/--std: %d and %d values: expected one per channel (%d)"
                             % (len(mean), len(std), channels))
        if any(v <= 0 for v in std):
            raise UsageError("--std '%s': expected positive values" % args.std)
    try:
        accuracy, loss, n = evaluate(module, x, y, mean, std, args.batch_size)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - the model's forward
        raise UsageError("%s: forward fails on %s %s images of shape %s: %s"
                         % (args.model, args.dataset, args.split,
                            _shape_text(x.shape[1:]), _first_line(e)))
    print("accuracy %.6f loss %.6f examples %d" % (accuracy, loss, n))
    return 0


def main(argv=None):
    try:
        args = make_parser().parse_args(argv)
        _require_torch()
        if args.command == "script":
            return cmd_script(args)
        return cmd_evaluate(args)
    except UsageError as e:
        print("%s: %s" % (PROG, str(e).replace("\n", " ")), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
