"""Train a small MLP on scikit-learn's handwritten digits, with gradients from bytegrad.

    make demo                                   # or, in a venv with bytegrad[demo]:
    python examples/train_mlp_digits.py [--epochs 30] [--batch-size 32]

The model is 64-64-10 (tanh, softmax cross-entropy), written in plain NumPy; `@differentiate`
gives the gradient of the loss with respect to a dict of parameters, which momentum SGD applies.
The digits (8x8 images, 1797 of them) ship with scikit-learn: nothing is downloaded.
Prints the time to the first gradient, the steady time per training step and the test accuracy.
"""
import time

T_START = time.perf_counter()

import numpy as np  # noqa: E402  (imports are timed: they are part of the time to first gradient)

from bytegrad import differentiate  # noqa: E402

T_IMPORTED = time.perf_counter()

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402


@differentiate
def loss(params, x, y):
    """Mean softmax cross-entropy of the MLP on a batch: x (n, 64), y one-hot (n, 10)."""
    h = np.tanh(x @ params["W1"] + params["b1"])
    z = h @ params["W2"] + params["b2"]
    z = z - np.max(z, axis=1, keepdims=True)                       # stable log-softmax
    log_p = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return -np.sum(y * log_p) / x.shape[0]


def predict(params, x):
    h = np.tanh(x @ params["W1"] + params["b1"])
    return np.argmax(h @ params["W2"] + params["b2"], axis=1)


def init_params(rng, sizes=(64, 64, 10)):
    params = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        params[f"W{i}"] = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
        params[f"b{i}"] = np.zeros(n_out)
    return params


def load_data(rng, test_fraction=0.2):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = digits.data / 16.0                       # pixels 0..16 -> 0..1
    y = np.eye(10)[digits.target]                # one-hot labels
    order = rng.permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    x_train, y_train, x_test, y_test = load_data(rng)
    params = init_params(rng)
    velocity = {k: np.zeros_like(v) for k, v in params.items()}

    # The first gradient: rewrites `loss` for this signature, then runs it.
    t0 = time.perf_counter()
    grads = loss.grad(params, x_train[: args.batch_size], y_train[: args.batch_size])
    first_grad_s = time.perf_counter() - t0
    assert grads.keys() == params.keys()
    print(f"time to first gradient: {T_IMPORTED - T_START + first_grad_s:.3f} s "
          f"= import numpy + bytegrad {T_IMPORTED - T_START:.3f} s "
          f"+ first loss.grad call {first_grad_s:.3f} s (loading the data not counted)")

    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    steps_per_epoch = -(-len(x_train) // args.batch_size)
    bar = None
    if tqdm is not None and not args.no_progress:
        bar = tqdm(total=args.epochs * steps_per_epoch, desc="training", unit="step")

    step_times = []
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for start in range(0, len(x_train), args.batch_size):
            batch = order[start:start + args.batch_size]
            t0 = time.perf_counter()
            value, grads = loss.value_and_grad(params, x_train[batch], y_train[batch])
            for k in params:
                velocity[k] = args.momentum * velocity[k] - args.lr * grads[k]
                params[k] = params[k] + velocity[k]
            step_times.append(time.perf_counter() - t0)
            losses.append(float(value))
            if bar is not None:
                bar.update()
        if bar is not None:
            bar.set_postfix(epoch=epoch + 1, loss=f"{np.mean(losses):.4f}")
    if bar is not None:
        bar.close()

    accuracy = float(np.mean(predict(params, x_test) == np.argmax(y_test, axis=1)))
    print(f"steady time per step (gradient + update, batch {args.batch_size}): "
          f"{1e3 * statistics.median(step_times[1:]):.3f} ms median over {len(step_times) - 1} steps")
    print(f"final training loss {np.mean(losses):.4f}; test loss {loss(params, x_test, y_test):.4f} "
          "(a plain call of the decorated function)")
    print(f"test accuracy: {100 * accuracy:.1f}% on {len(x_test)} held-out digits")
    if accuracy < 0.9:
        print("expected above 90%: something is wrong", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
