"""Tests of python/asgd_torch.py (unittest, no other dependency than torch and numpy).

Run one group:  python3 tests/python/asgd_torch_test.py ScriptTest
Exits with status 77 (ctest's SKIP_RETURN_CODE) and says why when torch cannot be
imported, and for MnistTest when the MNIST test files are not in $ASGD_DATA_DIR.
"""

import contextlib
import gzip
import io
import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "python", "asgd_torch.py")
USER_MODELS = os.path.join(HERE, "user_models.py")
SKIP = 77

try:
    import numpy as np
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError as e:
    TORCH_MISSING = "cannot import torch or numpy with %s (%s): install Debian's python3-torch" % (
        sys.executable, e)

    class nn:  # noqa: N801 - lets the module-level classes below be defined; main() skips
        Module = object
else:
    TORCH_MISSING = None
    sys.path.insert(0, os.path.join(REPO, "python"))
    import asgd_torch  # noqa: E402


def run_main(argv):
    """asgd_torch.main in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = asgd_torch.main(argv)
    return status, out.getvalue(), err.getvalue()


def run_process(argv):
    """The script as a process, as asgd's tests and users run it."""
    p = subprocess.run([sys.executable, SCRIPT] + argv, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="asgd_torch_test_")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def script(self, *flags):
        """Runs `script` with the flags in-process; returns the loaded module."""
        out = self.path("model.pt")
        status, stdout, stderr = run_main(["script"] + list(flags) + ["--out", out])
        self.assertEqual(status, 0, stderr)
        self.assertIn("wrote " + out, stdout)
        return torch.jit.load(out)


# ---- script ---------------------------------------------------------------------------


def resnet20_parameter_count(in_channels, classes):
    """He et al.'s ResNet-20 counted layer by layer: 3×3 convolutions without bias, a
    BatchNorm (γ, β) after each, option-A shortcuts (no parameters), fc 64 → classes."""
    count = 16 * in_channels * 9 + 2 * 16  # conv1, bn1
    in_planes = 16
    for planes in (16, 32, 64):
        for _ in range(3):
            count += planes * in_planes * 9 + 2 * planes  # conv1, bn1 of the block
            count += planes * planes * 9 + 2 * planes  # conv2, bn2
            in_planes = planes
    return count + 64 * classes + classes


def asgd_cnn_reference(x, params, kernel):
    """asgd's cnn by its equations (models/architecture.h), in numpy float64: per block
    cross-correlation with zero padding (kernel // 2 in block 1, 0 later), ReLU, 2×2
    max-pool with stride 2 (floor), then flatten in (c, i, j) order and the dense layers
    y = x·Wᵀ + b (torch's [out, in] weights), ReLU between them."""
    a = x.astype(np.float64)
    b = 1
    while "conv%d.weight" % b in params:
        w, bias = params["conv%d.weight" % b], params["conv%d.bias" % b]
        pad = kernel // 2 if b == 1 else 0
        a = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        n, c, h, wd = a.shape
        oh, ow = h - kernel + 1, wd - kernel + 1
        out = np.zeros((n, w.shape[0], oh, ow))
        for o in range(w.shape[0]):
            out[:, o] = bias[o]
            for ci in range(c):
                for u in range(kernel):
                    for v in range(kernel):
                        out[:, o] += w[o, ci, u, v] * a[:, ci, u:u + oh, v:v + ow]
        out = np.maximum(out, 0)
        ph, pw = oh // 2, ow // 2
        out = out[:, :, :2 * ph, :2 * pw].reshape(n, w.shape[0], ph, 2, pw, 2).max(axis=(3, 5))
        a = out
        b += 1
    a = a.reshape(a.shape[0], -1)  # (c, i, j) order
    f = 1
    while "fc%d.weight" % f in params:
        a = a @ params["fc%d.weight" % f].T + params["fc%d.bias" % f]
        if "fc%d.weight" % (f + 1) in params:
            a = np.maximum(a, 0)
        f += 1
    return a


class ScriptTest(TempDirTest):
    def test_every_arch_scripts_and_passes_its_checks_on_both_shapes(self):
        for arch in asgd_torch.ARCHES:
            for shape in ((1, 28, 28), (3, 32, 32)):
                with self.subTest(arch=arch, shape=shape):
                    m = self.script("--arch", arch, "--input-shape", ",".join(map(str, shape)),
                                    "--classes", "10")
                    self.assertIsInstance(m, torch.jit.ScriptModule)
                    for mode in (False, True):
                        m.train(mode)
                        y = m(torch.rand((3,) + shape))
                        self.assertEqual(tuple(y.shape), (3, 10))
                        self.assertEqual(y.dtype, torch.float32)
                    params = list(m.parameters())
                    self.assertTrue(params)
                    self.assertTrue(all(p.dtype == torch.float32 for p in params))

    def test_parameter_counts_are_asgds_and_resnet20s(self):
        def count(*flags):
            return sum(p.numel() for p in self.script(*flags).parameters())

        # asgd's own counts (models/architecture.h).
        mnist = ["--input-shape", "1,28,28", "--classes", "10"]
        cifar = ["--input-shape", "3,32,32", "--classes", "10"]
        self.assertEqual(count("--arch", "mlp", *mnist), 269322)
        self.assertEqual(count("--arch", "softmax", *mnist), 7850)
        self.assertEqual(count("--arch", "cnn", *mnist), 61706)
        # ResNet-20: 269,722 on 3×32×32 (the "0.27M" of He et al.'s table 6), 269,434 on
        # one channel.
        self.assertEqual(resnet20_parameter_count(3, 10), 269722)
        self.assertEqual(resnet20_parameter_count(1, 10), 269434)
        self.assertEqual(count("--arch", "resnet20", *cifar), 269722)
        self.assertEqual(count("--arch", "resnet20", *mnist), 269434)

    def test_tensor_names_and_shapes_follow_asgds_layout(self):
        m = self.script("--arch", "mlp", "--hidden", "64,32", "--activation", "tanh",
                        "--input-shape", "1,28,28", "--classes", "10")
        self.assertEqual([(n, tuple(p.shape)) for n, p in m.named_parameters()], [
            ("fc1.weight", (64, 784)), ("fc1.bias", (64,)),
            ("fc2.weight", (32, 64)), ("fc2.bias", (32,)),
            ("fc3.weight", (10, 32)), ("fc3.bias", (10,))])
        m = self.script("--arch", "cnn", "--input-shape", "1,28,28", "--classes", "10")
        self.assertEqual([(n, tuple(p.shape)) for n, p in m.named_parameters()], [
            ("conv1.weight", (6, 1, 5, 5)), ("conv1.bias", (6,)),
            ("conv2.weight", (16, 6, 5, 5)), ("conv2.bias", (16,)),
            ("fc1.weight", (120, 400)), ("fc1.bias", (120,)),
            ("fc2.weight", (84, 120)), ("fc2.bias", (84,)),
            ("fc3.weight", (10, 84)), ("fc3.bias", (10,))])

    def test_cnn_computes_asgds_equations(self):
        # Non-square input, odd sizes (floor pooling) and several channels pin the
        # padding, pooling and flatten order: 2×12×9 → block 1 (pad 1) 12×9 → 6×4,
        # block 2 (no pad) 4×2 → 2×1; 3 channels · 2 · 1 = 6 features.
        m = self.script("--arch", "cnn", "--cnn-channels", "4,3", "--cnn-fc", "5",
                        "--cnn-kernel", "3", "--input-shape", "2,12,9", "--classes", "4")
        params = {n: p.detach().double().numpy() for n, p in m.named_parameters()}
        self.assertEqual(params["fc1.weight"].shape, (5, 6))
        with torch.no_grad():  # non-zero biases, so that they are tested too
            for n, p in m.named_parameters():
                if n.endswith(".bias"):
                    p.copy_(torch.linspace(-0.2, 0.3, p.numel()))
        params = {n: p.detach().double().numpy() for n, p in m.named_parameters()}
        x = torch.rand(5, 2, 12, 9, generator=torch.Generator().manual_seed(3))
        want = asgd_cnn_reference(x.numpy(), params, kernel=3)
        got = m(x).detach().double().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    def test_initialisation_follows_asgds_rule(self):
        m = self.script("--arch", "mlp", "--hidden", "512", "--input-shape", "1,28,28",
                        "--classes", "10")
        p = dict(m.named_parameters())
        # fc1 is followed by a ReLU: He normal, std sqrt(2 / 784).
        self.assertAlmostEqual(float(p["fc1.weight"].std()) / math.sqrt(2 / 784), 1.0, delta=0.01)
        self.assertAlmostEqual(float(p["fc1.weight"].mean()), 0.0, delta=0.001)
        self.assertGreater(float(p["fc1.weight"].abs().max()), 3 * math.sqrt(2 / 784))
        # The output layer: Glorot uniform, a = sqrt(6 / (512 + 10)).
        a = math.sqrt(6 / (512 + 10))
        self.assertLessEqual(float(p["fc2.weight"].abs().max()), a)
        self.assertGreater(float(p["fc2.weight"].abs().max()), 0.99 * a)
        self.assertAlmostEqual(float(p["fc2.weight"].std()) / (a / math.sqrt(3)), 1.0, delta=0.05)
        self.assertEqual(float(p["fc1.bias"].abs().sum()) + float(p["fc2.bias"].abs().sum()), 0.0)
        # tanh: Glorot uniform for the hidden layer too (a conv's fans are c·k·k, o·k·k).
        m = self.script("--arch", "cnn", "--activation", "tanh", "--input-shape", "1,28,28",
                        "--classes", "10")
        w = dict(m.named_parameters())["conv2.weight"]
        a = math.sqrt(6 / (6 * 25 + 16 * 25))
        self.assertLessEqual(float(w.abs().max()), a)
        self.assertGreater(float(w.abs().max()), 0.95 * a)

    def test_seed_picks_the_initial_values(self):
        flags = ["--arch", "cnn", "--input-shape", "1,28,28", "--classes", "10"]
        a = [p.clone() for p in self.script(*flags, "--seed", "5").parameters()]
        b = [p.clone() for p in self.script(*flags, "--seed", "5").parameters()]
        c = [p.clone() for p in self.script(*flags, "--seed", "6").parameters()]
        self.assertTrue(all(torch.equal(x, y) for x, y in zip(a, b)))
        self.assertFalse(torch.equal(a[0], c[0]))

    def test_resnet20_shortcut_is_option_a(self):
        x = torch.randn(2, 16, 7, 7)
        y = asgd_torch.ShortcutA(8)(x)
        self.assertEqual(tuple(y.shape), (2, 32, 4, 4))
        self.assertTrue(torch.equal(y[:, 8:24], x[:, :, ::2, ::2]))
        self.assertEqual(float(y[:, :8].abs().sum() + y[:, 24:].abs().sum()), 0.0)
        m = self.script("--arch", "resnet20", "--input-shape", "1,28,28", "--classes", "10")
        # No projection: every convolution is 3×3; 19 of them plus the fc, 19 BatchNorms.
        convs = [p for n, p in m.named_parameters() if p.dim() == 4]
        self.assertEqual(len(convs), 19)
        self.assertTrue(all(tuple(p.shape[2:]) == (3, 3) for p in convs))
        self.assertEqual(len([n for n, _ in m.named_buffers() if n.endswith("running_mean")]), 19)

    def test_checks_leave_batchnorm_statistics_and_train_mode_alone(self):
        m = self.script("--arch", "resnet20", "--input-shape", "1,28,28", "--classes", "10")
        self.assertTrue(m.training)
        for name, b in m.named_buffers():
            if name.endswith("running_mean"):
                self.assertEqual(float(b.abs().sum()), 0.0, name)
            elif name.endswith("running_var"):
                self.assertTrue(torch.equal(b, torch.ones_like(b)), name)
            else:
                self.assertEqual(int(b), 0, name)

    def test_trace_gives_the_same_function_as_script(self):
        flags = ["--arch", "mlp", "--hidden", "32", "--input-shape", "1,28,28", "--classes", "10"]
        scripted = self.script(*flags)
        traced = self.script(*flags, "--trace")
        x = torch.rand(4, 1, 28, 28)
        self.assertTrue(torch.equal(scripted(x), traced(x)))

    def test_own_module_with_factory_arguments(self):
        m = self.script("--module", USER_MODELS + ":good", "--factory-args", '{"width": 8}',
                        "--input-shape", "1,28,28", "--classes", "10")
        self.assertEqual([tuple(p.shape) for p in m.parameters()], [(8, 784), (8,), (10, 8), (10,)])
        m = self.script("--module", USER_MODELS + ":good_positional", "--factory-args",
                        "[12, 3, 4]", "--input-shape", "12", "--classes", "4")
        self.assertEqual(tuple(m(torch.rand(5, 12)).shape), (5, 4))
        # A module TorchScript cannot compile: --trace records it.
        m = self.script("--module", USER_MODELS + ":unscriptable", "--trace",
                        "--input-shape", "1,28,28", "--classes", "10")
        self.assertEqual(tuple(m(torch.rand(3, 1, 28, 28)).shape), (3, 10))

    def test_own_module_importing_its_neighbour(self):
        os.makedirs(self.path("src"))
        with open(self.path("src", "blocks.py"), "w") as f:
            f.write("from torch import nn\n\n\ndef head(n, classes):\n"
                    "    return nn.Sequential(nn.Flatten(1), nn.Linear(n, classes))\n")
        with open(self.path("src", "net.py"), "w") as f:
            f.write("import blocks\n\n\ndef make(classes):\n    return blocks.head(12, classes)\n")
        m = self.script("--module", self.path("src", "net.py") + ":make", "--factory-args",
                        '{"classes": 3}', "--input-shape", "3,4", "--classes", "3")
        self.assertEqual(tuple(m(torch.rand(2, 3, 4)).shape), (2, 3))

    def test_tracing_batchnorm_or_dropout_says_what_it_freezes(self):
        out = self.path("model.pt")
        status, _, stderr = run_main(["script", "--arch", "resnet20", "--trace", "--input-shape",
                                      "1,8,8", "--classes", "3", "--out", out])
        self.assertEqual(status, 0, stderr)
        self.assertIn("tracing freezes BatchNorm2d in train() mode", stderr)
        self.assertEqual(stderr.count("\n"), 1, stderr)
        status, _, stderr = run_main(["script", "--arch", "cnn", "--trace", "--input-shape",
                                      "1,28,28", "--classes", "10", "--out", out])
        self.assertEqual((status, stderr), (0, ""))

    def test_as_a_process(self):
        out = self.path("cnn.pt")
        status, stdout, stderr = run_process(["script", "--arch", "cnn", "--input-shape", "1,28,28",
                                              "--classes", "10", "--out", out])
        self.assertEqual(status, 0, stderr)
        self.assertEqual(stdout,
                         "wrote %s: cnn, 61706 parameters, input 1x28x28, 10 classes\n" % out)
        self.assertEqual(sum(p.numel() for p in torch.jit.load(out).parameters()), 61706)


class BadModuleTest(TempDirTest):
    def refused(self, argv, *expected):
        """argv (script with --out added) exits 2 with one line on stderr holding every
        expected fragment, and writes no file."""
        out = self.path("model.pt")
        status, stdout, stderr = run_main(["script"] + argv + ["--out", out])
        self.assertEqual(status, 2, stderr)
        self.assertEqual(stdout, "")
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertTrue(stderr.startswith("asgd_torch.py: "), stderr)
        for fragment in expected:
            self.assertIn(fragment, stderr)
        self.assertEqual(os.listdir(self.dir), [])
        return stderr

    def user(self, factory, classes="10"):
        return ["--module", USER_MODELS + ":" + factory, "--input-shape", "1,28,28",
                "--classes", classes]

    def test_wrong_class_count(self):
        self.refused(self.user("wrong_classes"), "wrong_classes", "[2, 7]",
                     "expected float32 [2, 10]")
        self.refused(["--arch", "mlp", "--input-shape", "1,28,28", "--classes", "1"], "--classes 1")
        self.refused(self.user("good", classes="1"), "--classes 1: expected at least 2")

    def test_non_float_parameters(self):
        self.refused(self.user("int_parameter"), "parameter 'steps' is int64", "expected float32")
        self.refused(self.user("double_parameters"), "parameter 'hidden.weight' is float64",
                     "expected float32")

    def test_no_parameters(self):
        self.refused(self.user("no_parameters"), "has no parameters", "expected at least one")

    def test_forward_failing_on_the_shape(self):
        self.refused(self.user("forward_fails"), "forward fails", "[2, 1, 28, 28]",
                     "cannot be multiplied")
        self.refused(["--arch", "mlp", "--input-shape", "1,28,28", "--classes", "10", "--trace",
                      "--module", USER_MODELS + ":nope"], "not allowed with")

    def test_forward_returning_no_tensor(self):
        self.refused(self.user("returns_tuple"), "forward returns tuple",
                     "expected a float32 tensor")

    def test_factory_problems(self):
        self.refused(self.user("not_a_module"), "is int", "expected a torch.nn.Module")
        self.refused(self.user("raises"), "raises(...) fails", "the factory's own error")
        self.refused(self.user("missing"), "has no function 'missing'")
        self.refused(["--module", self.path("absent.py") + ":f", "--input-shape", "3", "--classes",
                      "2"], "absent.py: no such file")
        self.refused(self.user("good") + ["--factory-args", "{width: 3}"], "--factory-args",
                     "expected a JSON object or array")
        self.refused(self.user("unscriptable"), "torch.jit.script fails", "--trace may work")

    def test_bad_architecture_flags(self):
        self.refused(["--arch", "cnn", "--cnn-channels", "6,16,16", "--input-shape", "1,28,28",
                      "--classes", "10"], "shrinks to nothing in convolution block 3")
        self.refused(["--arch", "cnn", "--cnn-kernel", "4", "--input-shape", "1,28,28",
                      "--classes", "10"], "kernel size must be odd")
        self.refused(["--arch", "cnn", "--input-shape", "784", "--classes", "10"],
                     "channels,height,width")
        self.refused(["--arch", "resnet20", "--input-shape", "28,28", "--classes", "10"],
                     "channels,height,width")
        self.refused(["--arch", "mlp", "--hidden", "256,x", "--input-shape", "1,28,28",
                      "--classes", "10"], "--hidden '256,x'", "positive integers")
        self.refused(["--arch", "vgg", "--input-shape", "1,28,28", "--classes", "10"],
                     "invalid choice: 'vgg'")
        self.refused(["--input-shape", "1,28,28", "--classes", "10"], "--arch", "required")

    def test_as_a_process(self):
        out = self.path("model.pt")
        status, stdout, stderr = run_process(
            ["script"] + self.user("wrong_classes") + ["--out", out])
        self.assertEqual(status, 2)
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertIn("expected float32 [2, 10]", stderr)
        self.assertFalse(os.path.exists(out))
        status, _, stderr = run_process(["script", "--arch", "mlp", "--input-shape", "3",
                                         "--classes", "2", "--out", out, "--bogus"])
        self.assertEqual(status, 2)
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertIn("unrecognized arguments: --bogus", stderr)


# ---- evaluate -------------------------------------------------------------------------


class Pick(nn.Module):
    """Logit c = scale · x[b, channel[c], row[c], col[c]]: a model whose logits the test
    controls through the pixels."""

    def __init__(self, channel, row, col):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("index", torch.tensor(channel) * 100000 + torch.tensor(row) * 100
                             + torch.tensor(col))

    def forward(self, x):
        flat = x[:, :, :, :]
        c = torch.div(self.index, 100000, rounding_mode="floor")
        r = torch.div(self.index % 100000, 100, rounding_mode="floor")
        k = self.index % 100
        return self.scale * flat[:, c, r, k]


def float32_of(v):
    """The float asgd's loaders make of byte v (the nearest float32 to v / 255)."""
    return float(np.float32(v / 255.0))


def expected_metrics(logits, labels):
    """Accuracy (first arg-max) and mean cross-entropy, in float64, by hand."""
    correct, loss = 0, 0.0
    for z, y in zip(logits, labels):
        best = max(range(len(z)), key=lambda c: (z[c], -c))
        correct += best == y
        m = max(z)
        loss += math.log(sum(math.exp(v - m) for v in z)) + m - z[y]
    return correct / len(labels), loss / len(labels)


def write_idx(path, magic, dims, payload, compress):
    data = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + bytes(payload)
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(data)


def parse_line(line):
    words = line.split()
    assert len(words) == 6 and words[0::2] == ["accuracy", "loss", "examples"], line
    return float(words[1]), float(words[3]), int(words[5])


class EvaluateTest(TempDirTest):
    def save(self, module):
        path = self.path("pick.pt")
        torch.jit.save(torch.jit.script(module), path)
        return path

    def evaluate(self, *argv):
        status, stdout, stderr = run_main(["evaluate"] + list(argv))
        self.assertEqual(status, 0, stderr)
        self.assertEqual(stderr, "")
        return parse_line(stdout)

    def test_idx(self):
        # 5 images of 2×3 pixels, 4 classes: logit c = pixel c of the first row (+ pixel
        # (1, 0) for class 3).
        rows, cols = 2, 3
        images = [
            [10, 200, 30, 255, 0, 0],  # best class 1 (200) ... class 3 (255) wins
            [90, 90, 12, 5, 0, 0],  # tie between 0 and 1: the first, 0
            [0, 0, 0, 0, 0, 0],  # all equal: class 0
            [1, 2, 3, 0, 7, 7],  # class 2
            [250, 7, 9, 100, 1, 1],  # class 0
        ]
        labels = [3, 1, 0, 2, 3]
        model = self.save(Pick([0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 2, 0]))
        logits = [[float32_of(img[0]), float32_of(img[1]), float32_of(img[2]), float32_of(img[3])]
                  for img in images]
        accuracy, loss = expected_metrics(logits, labels)
        self.assertEqual(accuracy, 3 / 5)  # images 0, 2, 3
        # asgd's layout (DIR/mnist/, images gzip, labels plain) for the test split.
        os.makedirs(self.path("mnist"))
        write_idx(self.path("mnist", "t10k-images-idx3-ubyte.gz"), 2051, [5, rows, cols],
                  sum(images, []), compress=True)
        write_idx(self.path("mnist", "t10k-labels-idx1-ubyte"), 2049, [5], labels, compress=False)
        got = self.evaluate(model, "--data-dir", self.dir, "--dataset", "mnist")
        self.assertEqual(got[0], round(accuracy, 6))
        self.assertAlmostEqual(got[1], loss, places=6)
        self.assertEqual(got[2], 5)
        # --limit, in batches of 2.
        acc3, loss3 = expected_metrics(logits[:3], labels[:3])
        got = self.evaluate(model, "--data-dir", self.dir, "--dataset", "mnist", "--limit", "3",
                            "--batch-size", "2")
        self.assertEqual(got, (round(acc3, 6), round(loss3, 6), 3))
        # The train split, files straight in the folder.
        train = self.path("flat")
        os.makedirs(train)
        write_idx(os.path.join(train, "train-images-idx3-ubyte"), 2051, [5, rows, cols],
                  sum(images, []), compress=False)
        write_idx(os.path.join(train, "train-labels-idx1-ubyte.gz"), 2049, [5], labels,
                  compress=True)
        got = self.evaluate(model, "--data-dir", train, "--dataset", "fashion-mnist",
                            "--split", "train")
        self.assertEqual(got, (round(accuracy, 6), round(loss, 6), 5))
        # --mean/--std: (x - 0.5) / 0.25 on the one channel.
        norm = [[(v - 0.5) / 0.25 for v in z] for z in logits]
        acc_n, loss_n = expected_metrics(norm, labels)
        got = self.evaluate(model, "--data-dir", self.dir, "--dataset", "mnist", "--mean", "0.5",
                            "--std", "0.25")
        self.assertEqual(got[0], round(acc_n, 6))
        self.assertAlmostEqual(got[1], loss_n, places=5)

    def test_idx_pixels_are_asgds_floats(self):
        write_idx(self.path("i"), 2051, [1, 16, 16], list(range(256)), compress=False)
        write_idx(self.path("l"), 2049, [1], [0], compress=False)
        x, y = asgd_torch.load_idx(self.path("i"), self.path("l"))
        self.assertEqual(tuple(x.shape), (1, 1, 16, 16))
        self.assertEqual(x.dtype, torch.float32)
        self.assertEqual(x.flatten().tolist(), [float32_of(v) for v in range(256)])
        self.assertEqual(y.tolist(), [0])

    def test_cifar10(self):
        # Logit c = pixel (channel c % 3, row c, column 31 - c): pins the channel-major,
        # row-major record layout.
        classes = list(range(10))
        channel = [c % 3 for c in classes]
        row = classes
        col = [31 - c for c in classes]
        model = self.save(Pick(channel, row, col))
        rng = np.random.default_rng(7)

        def records(count):
            recs, logits, labels = [], [], []
            for _ in range(count):
                pixels = rng.integers(0, 256, size=3 * 32 * 32, dtype=np.uint8)
                label = int(rng.integers(0, 10))
                recs.append(bytes([label]) + pixels.tobytes())
                logits.append([float32_of(int(pixels[channel[c] * 1024 + row[c] * 32 + col[c]]))
                               for c in classes])
                labels.append(label)
            return recs, logits, labels

        # Labels equal to the arg-max for half of the test images, so accuracy is not 0.
        recs, logits, labels = records(8)
        for i in range(0, 8, 2):
            labels[i] = max(classes, key=lambda c: (logits[i][c], -c))
            recs[i] = bytes([labels[i]]) + recs[i][1:]
        os.makedirs(self.path("cifar-10-batches-bin"))
        with open(self.path("cifar-10-batches-bin", "test_batch.bin"), "wb") as f:
            f.write(b"".join(recs))
        accuracy, loss = expected_metrics(logits, labels)
        self.assertGreaterEqual(accuracy, 0.5)
        got = self.evaluate(model, "--data-dir", self.dir, "--dataset", "cifar10")
        self.assertEqual(got[0], round(accuracy, 6))
        self.assertAlmostEqual(got[1], loss, places=6)
        self.assertEqual(got[2], 8)
        # The train split: five files read in order, straight in the folder; --limit
        # crosses a file boundary.
        all_logits, all_labels = [], []
        for i in range(1, 6):
            recs, logits, labels = records(2)
            with open(self.path("data_batch_%d.bin" % i), "wb") as f:
                f.write(b"".join(recs))
            all_logits += logits
            all_labels += labels
        accuracy, loss = expected_metrics(all_logits[:7], all_labels[:7])
        got = self.evaluate(model, "--data-dir", self.dir, "--dataset", "cifar10",
                            "--split", "train", "--limit", "7")
        self.assertEqual(got, (round(accuracy, 6), round(loss, 6), 7))
        # Per-channel normalisation.
        mean, std = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]
        norm = [[(z[c] - mean[channel[c]]) / std[channel[c]] for c in classes] for z in all_logits]
        accuracy, loss = expected_metrics(norm, all_labels)
        got = self.evaluate(model, "--data-dir", self.dir, "--dataset", "cifar10",
                            "--split", "train", "--mean", "0.4,0.5,0.6", "--std", "0.2,0.25,0.3")
        self.assertEqual(got[0], round(accuracy, 6))
        self.assertAlmostEqual(got[1], loss, places=5)

    def test_eval_mode(self):
        # A dropout model gives the same loss twice: evaluation runs in eval() mode.
        model = nn.Sequential(nn.Flatten(1), nn.Dropout(0.5), nn.Linear(6, 4))
        path = self.save(model)
        write_idx(self.path("t10k-images-idx3-ubyte"), 2051, [3, 2, 3], list(range(18)),
                  compress=False)
        write_idx(self.path("t10k-labels-idx1-ubyte"), 2049, [3], [0, 1, 2], compress=False)
        a = self.evaluate(path, "--data-dir", self.dir, "--dataset", "mnist")
        b = self.evaluate(path, "--data-dir", self.dir, "--dataset", "mnist")
        self.assertEqual(a, b)
        model.eval()
        x = torch.tensor([[float32_of(v) for v in range(i * 6, i * 6 + 6)] for i in range(3)])
        want = F.cross_entropy(model(x.view(3, 1, 2, 3)), torch.tensor([0, 1, 2]))
        self.assertAlmostEqual(a[1], float(want), places=5)

    def refused(self, argv, *expected):
        status, stdout, stderr = run_main(["evaluate"] + argv)
        self.assertEqual(status, 2, stderr)
        self.assertEqual(stdout, "")
        self.assertEqual(stderr.count("\n"), 1, stderr)
        for fragment in expected:
            self.assertIn(fragment, stderr)

    def test_bad_input(self):
        model = self.save(Pick([0], [0], [0]))
        self.refused([self.path("none.pt"), "--data-dir", self.dir, "--dataset", "mnist"],
                     "none.pt: no such file")
        with open(self.path("junk.pt"), "wb") as f:
            f.write(b"not a model")
        self.refused([self.path("junk.pt"), "--data-dir", self.dir, "--dataset", "mnist"],
                     "junk.pt: torch.jit.load fails")
        self.refused([model, "--data-dir", self.dir, "--dataset", "mnist"],
                     "t10k-images-idx3-ubyte[.gz] not found")
        self.refused([model, "--data-dir", self.path("nodir"), "--dataset", "mnist"],
                     "no such directory")
        self.refused([model, "--data-dir", self.dir, "--dataset", "cifar10"],
                     "test_batch.bin not found")
        with open(self.path("test_batch.bin"), "wb") as f:
            f.write(bytes(3073 * 2 + 5))
        self.refused([model, "--data-dir", self.dir, "--dataset", "cifar10"],
                     "test_batch.bin: 6151 bytes: expected a multiple of 3073")
        write_idx(self.path("t10k-images-idx3-ubyte"), 2049, [1, 2, 3], [0] * 6, compress=False)
        write_idx(self.path("t10k-labels-idx1-ubyte"), 2049, [1], [0], compress=False)
        self.refused([model, "--data-dir", self.dir, "--dataset", "mnist"],
                     "expected IDX magic 2051 (images), found 2049")
        write_idx(self.path("t10k-images-idx3-ubyte"), 2051, [2, 2, 3], [0] * 6, compress=False)
        self.refused([model, "--data-dir", self.dir, "--dataset", "mnist"], "22 bytes: expected 28")
        write_idx(self.path("t10k-images-idx3-ubyte"), 2051, [1, 2, 3], [0] * 6, compress=False)
        write_idx(self.path("t10k-labels-idx1-ubyte"), 2049, [1], [11], compress=False)
        self.refused([model, "--data-dir", self.dir, "--dataset", "mnist"], "label 11 of example 0")
        write_idx(self.path("t10k-labels-idx1-ubyte"), 2049, [1], [3], compress=False)
        # One logit for a label 3: too few classes.
        self.refused([model, "--data-dir", self.dir, "--dataset", "mnist"], "1 logits per example")
        self.refused([model, "--data-dir", self.dir, "--dataset", "mnist", "--mean", "0.1"],
                     "--mean and --std")
        self.refused([model, "--data-dir", self.dir, "--dataset", "mnist", "--mean", "0.1,0.2",
                      "--std", "1,1"], "one per channel (1)")
        self.refused([model, "--data-dir", self.dir, "--dataset", "mnist", "--limit", "0"],
                     "--limit 0")
        self.refused([model, "--data-dir", self.dir, "--dataset", "svhn"], "invalid choice: 'svhn'")


class MnistTest(TempDirTest):
    """On the real MNIST test set in $ASGD_DATA_DIR (skipped without it): an untrained
    softmax is near chance; trained for one pass over 6,000 training images in Python,
    it is well above it, which also checks that the pixels are read as training saw them."""

    def test_untrained_and_trained_softmax(self):
        data_dir = os.environ["ASGD_DATA_DIR"]
        model = self.script("--arch", "softmax", "--input-shape", "1,28,28", "--classes", "10")
        path = self.path("model.pt")
        status, stdout, stderr = run_process(["evaluate", path, "--data-dir", data_dir,
                                              "--dataset", "mnist", "--limit", "1000"])
        self.assertEqual(status, 0, stderr)
        accuracy, loss, n = parse_line(stdout)
        self.assertEqual(n, 1000)
        self.assertLess(accuracy, 0.35)
        self.assertGreater(loss, 1.5)

        x, y = asgd_torch.load_dataset(data_dir, "mnist", "train", limit=6000)
        self.assertEqual(tuple(x.shape), (6000, 1, 28, 28))
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        model.train()
        for start in range(0, 6000, 32):
            opt.zero_grad()
            F.cross_entropy(model(x[start:start + 32]), y[start:start + 32]).backward()
            opt.step()
        torch.jit.save(model, path)
        status, stdout, stderr = run_process(["evaluate", path, "--data-dir", data_dir,
                                              "--dataset", "mnist", "--limit", "1000"])
        self.assertEqual(status, 0, stderr)
        accuracy, loss, n = parse_line(stdout)
        self.assertEqual(n, 1000)
        self.assertGreater(accuracy, 0.8)
        self.assertLess(loss, 0.7)


def main(argv):
    if TORCH_MISSING:
        print("SKIP: " + TORCH_MISSING)
        return SKIP
    names = argv[1:] or ["ScriptTest", "BadModuleTest", "EvaluateTest", "MnistTest"]
    if "MnistTest" in names:
        data_dir = os.environ.get("ASGD_DATA_DIR", "")
        mnist = os.path.join(data_dir, "mnist")
        have = data_dir and all(
            any(os.path.isfile(os.path.join(mnist, f + gz)) for gz in (".gz", ""))
            for f in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
                      "train-images-idx3-ubyte", "train-labels-idx1-ubyte"))
        if not have:
            names.remove("MnistTest")
            if not names:
                print("SKIP: MNIST not found in $ASGD_DATA_DIR/mnist (ASGD_DATA_DIR=%r): "
                      "get it with `asgd data fetch mnist`" % data_dir)
                return SKIP
    suite = unittest.TestSuite(
        unittest.defaultTestLoader.loadTestsFromTestCase(globals()[n]) for n in names)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
