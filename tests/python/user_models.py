"""Factories for asgd_torch.py script --module in the tests: one good researcher's model
and one module for every way a model can be unfit for asgd."""

import torch
from torch import nn


class TwoLayer(nn.Module):
    """A researcher's own model: flatten, a hidden layer of `width` with dropout, logits."""

    def __init__(self, inputs, width, classes):
        super().__init__()
        self.hidden = nn.Linear(inputs, width)
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(width, classes)

    def forward(self, x):
        return self.out(self.drop(torch.relu(self.hidden(x.flatten(1)))))


def good(inputs=784, width=32, classes=10):
    return TwoLayer(inputs, width, classes)


def good_positional(inputs, width, classes):
    return TwoLayer(inputs, width, classes)


def wrong_classes():
    """Maps 1×28×28 to 7 logits."""
    return TwoLayer(784, 16, 7)


class IntParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)
        self.steps = nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False)

    def forward(self, x):
        return self.fc(x.flatten(1))


def int_parameter():
    return IntParameter()


def double_parameters():
    return TwoLayer(784, 16, 10).double()


class NoParameters(nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :10]


def no_parameters():
    return NoParameters()


def forward_fails():
    """Expects 100 features, gets 784."""
    return nn.Sequential(nn.Flatten(1), nn.Linear(100, 10))


class ReturnsTuple(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        y = self.fc(x.flatten(1))
        return y, y


def returns_tuple():
    return ReturnsTuple()


def not_a_module():
    return 42


def raises():
    raise RuntimeError("the factory's own error")


class Unscriptable(nn.Module):
    """Calls a Python function TorchScript cannot compile; tracing records it fine."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        return self.fc(_flatten_in_python(x))


def _flatten_in_python(x, *rest, **options):
    return x.reshape(x.shape[0], -1)


def unscriptable():
    return Unscriptable()
