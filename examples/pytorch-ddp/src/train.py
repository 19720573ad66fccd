"""Data-parallel training with PyTorch DDP (gloo backend, CPU) on the digits
data set that ships with scikit-learn.

tide (like Azure ML) starts one process per rank and sets MASTER_ADDR,
MASTER_PORT, WORLD_SIZE, RANK and LOCAL_RANK, so init_process_group reads
everything from the environment. Each rank trains on its shard of the data;
DDP averages the gradients. Rank 0 reports the test accuracy and writes metrics
to ./outputs; every rank saves a checkpoint to its node's
$TIDE_CHECKPOINT_DIR after every epoch, and a restarted job resumes from the
newest one any node has."""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def log(rank, msg):
    print(f"rank {rank}: {msg}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--output", default="outputs")
    args = parser.parse_args()

    torch.set_num_threads(1)  # the ranks share the node's cores
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    log(rank, f"joined a world of {world} (MASTER_ADDR={os.environ['MASTER_ADDR']}, "
              f"MASTER_PORT={os.environ['MASTER_PORT']}, node rank {os.environ.get('NODE_RANK')})")

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    train = TensorDataset(x_train, y_train)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    log(rank, f"training on {len(sampler)} of {len(train)} images")

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    # Every rank checkpoints to its node's $TIDE_CHECKPOINT_DIR, so whichever
    # node holds rank 0 after a restart, the newest checkpoint of any node is
    # found and sent to all ranks.
    checkpoint_dir = os.environ.get("TIDE_CHECKPOINT_DIR", "checkpoints")
    checkpoint = os.path.join(checkpoint_dir, "checkpoint.pt")
    local_epoch = -1
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        local_epoch = state["epoch"]
    newest = torch.tensor([local_epoch])
    dist.all_reduce(newest, op=dist.ReduceOp.MAX)
    start_epoch = int(newest[0]) + 1
    if start_epoch > 0:
        source = torch.tensor([rank if local_epoch == start_epoch - 1 else world])
        dist.all_reduce(source, op=dist.ReduceOp.MIN)
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=int(source[0]))
        log(rank, f"resuming after epoch {start_epoch} from rank {int(source[0])}'s checkpoint")
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    start = time.time()
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        log(rank, f"epoch {epoch + 1}/{args.epochs} loss {total / max(batches, 1):.4f}")
        os.makedirs(checkpoint_dir, exist_ok=True)
        torch.save({"model": model.state_dict(), "epoch": epoch}, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)

    if rank == 0:
        with torch.no_grad():
            accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
        log(rank, f"accuracy: {accuracy:.4f}")
        os.makedirs(args.output, exist_ok=True)
        with open(os.path.join(args.output, "metrics.json"), "w") as f:
            json.dump({"accuracy": accuracy, "world_size": world, "epochs": args.epochs,
                       "start_epoch": start_epoch, "seconds": round(time.time() - start, 3)}, f, indent=2)
        log(rank, f"checkpoint in {checkpoint}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
