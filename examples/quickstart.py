"""The README's quick start: a loss over a dict of parameters, and its gradient."""
import numpy as np

from bytegrad import differentiate


@differentiate
def loss(params, x, y):
    h = np.tanh(params["W"] @ x + params["b"][:, None])
    return np.mean((h - y) ** 2)


rng = np.random.default_rng(0)
params = {"W": rng.standard_normal((3, 4)), "b": np.zeros(3)}
x, y = rng.standard_normal((4, 8)), rng.standard_normal((3, 8))

print(loss(params, x, y))                     # a plain call runs the original function
g = loss.grad(params, x, y)                   # mirrors params: {"W": (3, 4) array, "b": (3,) array}
value, g = loss.value_and_grad(params, x, y)  # both from one forward and one reverse pass
value, back = loss.pullback(params, x, y)     # reverse mode by hand:
params_bar, x_bar, y_bar = back(1.0)          # one cotangent per positional argument

print({k: v.shape for k, v in g.items()}, x_bar.shape)
