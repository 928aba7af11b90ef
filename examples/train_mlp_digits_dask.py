"""Data-parallel training of the digits MLP on a Dask cluster, with gradients from bytegrad.

    python -m pip install -e '.[dask,demo]'    # in a clone of bytegrad
    python examples/train_mlp_digits_dask.py [--workers 2] [--epochs 20] [--batch-size 256]

The model and loss are those of examples/train_mlp_digits.py. Dask is the engine: a
`LocalCluster` of worker processes (one thread each). Each step the driver splits the batch into
one shard per worker and scatters the shards; each worker computes the gradient of its shard's
part of the loss with bytegrad (the differentiated function travels to the workers by pickling,
by value here since it lives in a script); the driver sums the gradients and takes a momentum-SGD
step. bytegrad adds no scheduler: what runs where is Dask's business. The workers share the
driver's disk cache (BYTEGRAD_CACHE_DIR), so the second worker to rewrite the loss loads it.
"""
import argparse
import sys
import time

import numpy as np

from bytegrad import differentiate
from train_mlp_digits import init_params, load_data, predict  # the model and data of the one-process demo


@differentiate
def shard_loss(params, x, y, n_total):
    """This shard's part of the batch's mean softmax cross-entropy: the shards' parts sum to it."""
    h = np.tanh(x @ params["W1"] + params["b1"])
    z = h @ params["W2"] + params["b2"]
    z = z - np.max(z, axis=1, keepdims=True)                       # stable log-softmax
    log_p = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return -np.sum(y * log_p) / n_total


def shard_gradient(params, x, y, n_total):
    """Runs on a worker: (loss part, gradient part) of one shard."""
    return shard_loss.value_and_grad(params, x, y, n_total)


def distributed_value_and_grad(client, params, x, y):
    """The batch's loss and gradient, each worker taking one shard: Dask scatters and gathers."""
    workers = sorted(client.scheduler_info()["workers"])
    xs = np.array_split(x, len(workers))
    ys = np.array_split(y, len(workers))
    futures = []
    for worker, x_part, y_part in zip(workers, xs, ys):
        x_f, y_f = client.scatter([x_part, y_part], workers=[worker])
        futures.append(client.submit(shard_gradient, params, x_f, y_f, len(x), workers=[worker], pure=False))
    parts = client.gather(futures)
    value = sum(v for v, _ in parts)
    grads = {k: sum(g[k] for _, g in parts) for k in params}
    return value, grads


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--momentum", type=float, default=0.9)
    args = parser.parse_args(argv)

    from dask.distributed import Client, LocalCluster

    rng = np.random.default_rng(args.seed)
    x_train, y_train, x_test, y_test = load_data(rng)
    params = init_params(rng)

    t0 = time.perf_counter()
    with LocalCluster(n_workers=args.workers, processes=True, threads_per_worker=1,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        print(f"{args.workers} worker processes up in {time.perf_counter() - t0:.1f} s")
        # one step's check: the workers' summed gradient is this process's gradient
        _, reference = shard_loss.value_and_grad(params, x_train[:args.batch_size], y_train[:args.batch_size],
                                                 args.batch_size)
        _, summed = distributed_value_and_grad(client, params, x_train[:args.batch_size], y_train[:args.batch_size])
        error = max(float(np.max(np.abs(summed[k] - reference[k])) / np.max(np.abs(reference[k])))
                    for k in params)
        print(f"summed worker gradients vs one process: max relative difference {error:.1e}")

        t0 = time.perf_counter()
        steps = 0
        velocity = {k: np.zeros_like(v) for k, v in params.items()}  # momentum SGD
        for epoch in range(args.epochs):
            order = rng.permutation(len(x_train))
            losses = []
            for start in range(0, len(x_train), args.batch_size):
                batch = order[start:start + args.batch_size]
                value, grads = distributed_value_and_grad(client, params, x_train[batch], y_train[batch])
                for k in params:
                    velocity[k] = args.momentum * velocity[k] - args.lr * grads[k]
                    params[k] = params[k] + velocity[k]
                losses.append(float(value))
                steps += 1
            print(f"epoch {epoch + 1:3d}: training loss {np.mean(losses):.4f}")
        elapsed = time.perf_counter() - t0
    accuracy = float(np.mean(predict(params, x_test) == np.argmax(y_test, axis=1)))
    print(f"{steps} steps in {elapsed:.1f} s ({1e3 * elapsed / steps:.1f} ms per step, Dask's round trips included)")
    print(f"test accuracy: {100 * accuracy:.1f}% on {len(x_test)} held-out digits")
    if accuracy < 0.9 or error > 1e-12:
        print("expected above 90% and matching gradients: something is wrong", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
