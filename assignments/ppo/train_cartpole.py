"""PPO on gymnasium's CartPole-v1, built from your functions in ppo.py (README §11).

Provided, not graded: read it, run it, do not edit it (the grader uses its own copy).

    python -m assignments.ppo.train_cartpole                  # your ppo.py, seed 0
    python -m assignments.ppo.train_cartpole --seed 3 --plot curve.png
    python -m assignments.ppo.train_cartpole --module solutions.ppo.ppo   # instructors

`train(ppo, seed)` takes the module with your functions as a parameter; the grader passes the
module under test. It uses `compute_gae`, `masked_whiten`, `ppo_clip_loss`, `value_loss` and
`entropy_from_logits`. CartPole counts as solved here when the mean return of the last 20
finished episodes reaches 195; the graded run must get there within 50,000 environment steps.

The vector environment resets an env in the same step that ends its episode ("same-step
autoreset"): the observation returned for that env already starts the next episode, and the
final observation of the finished one sits in `info["final_obs"]`. So every stored transition
is a real one (no reset transition enters the data), and the value we bootstrap from after a
truncation is V(final observation), never V(first observation of the next episode).
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Config:
    """Hyperparameters; the defaults are the graded ones."""

    num_envs: int = 4
    num_steps: int = 128  # per env and update: 512 transitions per update
    total_steps: int = 50_000  # environment steps over all envs
    lr: float = 1e-3
    anneal_lr: bool = True  # linearly to 0 over total_steps
    gamma: float = 0.99
    lam: float = 0.95
    epochs: int = 4
    num_minibatches: int = 4
    clip_eps: float = 0.2
    value_clip_eps: float | None = None
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    hidden: int = 64
    target_return: float = 195.0
    window: int = 20  # episodes in the moving mean that must reach target_return
    stop_at_target: bool = True

    def __post_init__(self) -> None:
        batch = self.num_envs * self.num_steps
        if batch % self.num_minibatches:
            raise ValueError(f"num_envs * num_steps = {batch} is not divisible by "
                             f"num_minibatches = {self.num_minibatches}")


@dataclass
class TrainResult:
    """What a run produced. `solved_at_step` is None when the target was never reached."""

    seed: int
    steps: int = 0
    solved_at_step: int | None = None
    episode_returns: list[float] = field(default_factory=list)
    episode_end_steps: list[int] = field(default_factory=list)
    updates: list[dict[str, float]] = field(default_factory=list)
    wall_s: float = 0.0

    def moving_mean(self, window: int) -> float:
        """Mean return of the last `window` episodes (nan before `window` episodes)."""
        if len(self.episode_returns) < window:
            return float("nan")
        return float(np.mean(self.episode_returns[-window:]))

    def to_plain(self) -> dict[str, Any]:
        return asdict(self)


class ActorCritic(nn.Module):
    """Separate two-layer tanh MLPs for the policy logits and the value (CleanRL's layout)."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int) -> None:
        super().__init__()
        self.actor = nn.Sequential(
            _layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(),
            _layer(hidden, num_actions, gain=0.01))
        self.critic = nn.Sequential(
            _layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(),
            _layer(hidden, 1, gain=1.0))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [batch, num_actions] and values [batch]."""
        return self.actor(obs), self.critic(obs).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)


def _layer(fan_in: int, fan_out: int, gain: float = 2 ** 0.5) -> nn.Linear:
    # Orthogonal weights and zero biases; a small gain on the policy head starts near uniform.
    layer = nn.Linear(fan_in, fan_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log pi(action | obs) for logits [batch, num_actions] and integer actions [batch]."""
    return torch.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def make_envs(config: Config) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=config.num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})


@dataclass
class Rollout:
    """One update's data, every tensor [num_steps, num_envs] except obs [.., .., obs_dim]."""

    obs: torch.Tensor
    actions: torch.Tensor
    logp: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_obs: torch.Tensor  # the true next observation (final_obs where the episode ended)


class EpisodeTracker:
    """Sums rewards per env and records a return whenever an episode ends."""

    def __init__(self, num_envs: int, result: TrainResult, config: Config) -> None:
        self.running = np.zeros(num_envs)
        self.result = result
        self.config = config

    def record(self, rewards: np.ndarray, done: np.ndarray, step: int) -> None:
        self.running += rewards
        for i in np.flatnonzero(done):
            self.result.episode_returns.append(float(self.running[i]))
            self.result.episode_end_steps.append(step)
            self.running[i] = 0.0
            solved = self.result.moving_mean(self.config.window) >= self.config.target_return
            if solved and self.result.solved_at_step is None:
                self.result.solved_at_step = step


def collect(envs: gym.vector.VectorEnv, model: ActorCritic, obs: np.ndarray, config: Config,
            tracker: EpisodeTracker, step: int) -> tuple[Rollout, np.ndarray, int]:
    """Run the policy for num_steps vector steps; returns the rollout, last obs and step count."""
    shape = (config.num_steps, config.num_envs)
    obs_dim = obs.shape[-1]
    data = Rollout(
        obs=torch.zeros(*shape, obs_dim), actions=torch.zeros(shape, dtype=torch.long),
        logp=torch.zeros(shape), values=torch.zeros(shape), rewards=torch.zeros(shape),
        terminated=torch.zeros(shape, dtype=torch.bool),
        truncated=torch.zeros(shape, dtype=torch.bool), next_obs=torch.zeros(*shape, obs_dim))
    for t in range(config.num_steps):
        obs_t = torch.as_tensor(obs, dtype=torch.float32)
        with torch.no_grad():
            logits, value = model(obs_t)
        action = torch.multinomial(torch.softmax(logits, dim=-1), 1).squeeze(-1)
        next_obs, reward, terminated, truncated, info = envs.step(action.numpy())
        step += config.num_envs
        true_next = np.array(next_obs, dtype=np.float32, copy=True)
        if "_final_obs" in info:  # the envs that ended were reset in this same step
            for i in np.flatnonzero(info["_final_obs"]):
                true_next[i] = info["final_obs"][i]
        data.obs[t] = obs_t
        data.actions[t] = action
        data.logp[t] = log_prob(logits, action)
        data.values[t] = value
        data.rewards[t] = torch.as_tensor(reward, dtype=torch.float32)
        data.terminated[t] = torch.as_tensor(terminated)
        data.truncated[t] = torch.as_tensor(truncated)
        data.next_obs[t] = torch.as_tensor(true_next)
        tracker.record(reward, terminated | truncated, step)
        obs = next_obs
    return data, obs, step


def update(ppo: ModuleType, model: ActorCritic, optimizer: torch.optim.Optimizer,
           data: Rollout, config: Config) -> dict[str, float]:
    """GAE on the rollout, then `epochs` passes of minibatch PPO; returns the mean statistics."""
    with torch.no_grad():
        next_values = model.value(data.next_obs)
    advantages, returns = ppo.compute_gae(data.rewards, data.values, data.terminated,
                                          data.truncated, next_values, config.gamma, config.lam)
    flat = {"obs": data.obs.flatten(0, 1), "actions": data.actions.flatten(),
            "logp": data.logp.flatten(), "values": data.values.flatten(),
            "advantages": advantages.flatten().detach(), "returns": returns.flatten().detach()}
    batch = flat["actions"].numel()
    size = batch // config.num_minibatches
    sums: dict[str, float] = {}
    count = 0
    for _ in range(config.epochs):
        order = torch.randperm(batch)
        for start in range(0, batch, size):
            idx = order[start:start + size]
            logits, values = model(flat["obs"][idx])
            logp = log_prob(logits, flat["actions"][idx])
            adv = ppo.masked_whiten(flat["advantages"][idx])
            pg_loss, stats = ppo.ppo_clip_loss(logp, flat["logp"][idx], adv, config.clip_eps)
            v_loss = ppo.value_loss(values, flat["values"][idx], flat["returns"][idx],
                                    config.value_clip_eps)
            entropy = ppo.entropy_from_logits(logits)
            loss = pg_loss + config.vf_coef * v_loss - config.ent_coef * entropy
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"the PPO loss is {float(loss)} (pg_loss {float(pg_loss)}, v_loss "
                    f"{float(v_loss)}, entropy {float(entropy)}); check masked_whiten's eps and "
                    f"the functions that produced the nan (README §14)")
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            logged = {"pg_loss": pg_loss, "v_loss": v_loss, "entropy": entropy, **stats}
            for key, value in logged.items():
                sums[key] = sums.get(key, 0.0) + float(value.detach())
            count += 1
    return {key: total / count for key, total in sums.items()}


def train(ppo: ModuleType, seed: int = 0, config: Config | None = None,
          log: Callable[[str], None] | None = print) -> TrainResult:
    """Train PPO on CartPole-v1 with the functions of `ppo`; deterministic for a given seed.

    Stops after `config.total_steps` environment steps, or as soon as the mean of the last
    `config.window` returns reaches `config.target_return` (when `config.stop_at_target`).
    `log` gets one progress line per update (None: silent).
    """
    config = config or Config()
    torch.manual_seed(seed)
    envs = make_envs(config)
    obs, _ = envs.reset(seed=seed)  # env i gets seed + i
    model = ActorCritic(envs.single_observation_space.shape[0],
                        int(envs.single_action_space.n), config.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, eps=1e-5)
    result = TrainResult(seed=seed)
    tracker = EpisodeTracker(config.num_envs, result, config)
    per_update = config.num_envs * config.num_steps
    num_updates = -(-config.total_steps // per_update)
    started = time.perf_counter()
    try:
        for k in range(num_updates):
            if config.anneal_lr:
                optimizer.param_groups[0]["lr"] = config.lr * (1.0 - k / num_updates)
            data, obs, result.steps = collect(envs, model, obs, config, tracker, result.steps)
            stats = update(ppo, model, optimizer, data, config)
            result.updates.append({"step": float(result.steps), **stats})
            if log is not None:
                log(_progress_line(result, stats, config))
            if config.stop_at_target and result.solved_at_step is not None:
                break
    finally:
        envs.close()
    result.wall_s = time.perf_counter() - started
    return result


def _progress_line(result: TrainResult, stats: dict[str, float], config: Config) -> str:
    mean = result.moving_mean(config.window)
    shown = f"{mean:6.1f}" if mean == mean else "   n/a"
    return (f"step {result.steps:>6}  episodes {len(result.episode_returns):>4}  "
            f"return(last {config.window}) {shown}  approx_kl {stats['approx_kl']:.4f}  "
            f"clipfrac {stats['clipfrac']:.3f}  entropy {stats['entropy']:.3f}  "
            f"v_loss {stats['v_loss']:.2f}")


def plot(results: list[TrainResult], path: str, config: Config) -> None:
    """Learning curves (returns and their moving mean) and the PPO statistics, to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_ret, ax_kl, ax_ent) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for res in results:
        returns = np.asarray(res.episode_returns)
        ends = np.asarray(res.episode_end_steps)
        (line,) = ax_ret.plot(ends, returns, ".", alpha=0.25, markersize=3)
        if len(returns) >= config.window:
            kernel = np.ones(config.window) / config.window
            ax_ret.plot(ends[config.window - 1:], np.convolve(returns, kernel, "valid"),
                        color=line.get_color(), label=f"seed {res.seed}")
        steps = [u["step"] for u in res.updates]
        ax_kl.plot(steps, [u["approx_kl"] for u in res.updates], color=line.get_color())
        ax_kl.plot(steps, [u["clipfrac"] for u in res.updates], "--", color=line.get_color())
        ax_ent.plot(steps, [u["entropy"] for u in res.updates], color=line.get_color())
    ax_ret.axhline(config.target_return, color="gray", linestyle=":", label="target")
    ax_ret.set_ylabel(f"episode return (dots), mean of last {config.window}")
    ax_ret.legend(loc="upper left")
    ax_kl.set_ylabel("approx_kl (—), clipfrac (--)")
    ax_ent.set_ylabel("policy entropy (nats)")
    ax_ent.set_xlabel("environment steps")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_override(item: str) -> tuple[str, Any]:
    """"lam=0.9" -> ("lam", 0.9), converted to the type of the Config field's default."""
    key, sep, text = item.partition("=")
    defaults = asdict(Config())
    if not sep or key not in defaults:
        raise SystemExit(f"--set {item!r}: expected KEY=VALUE with KEY one of {sorted(defaults)}")
    default = defaults[key]
    if text.lower() == "none":
        return key, None
    if isinstance(default, bool):
        return key, text.lower() in ("1", "true", "yes")
    return key, type(default)(text) if default is not None else float(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default="assignments.ppo.ppo",
                        help="module with the PPO functions (default: your assignments.ppo.ppo)")
    parser.add_argument("--seed", type=int, nargs="+", default=[0], help="one run per seed")
    parser.add_argument("--steps", type=int, default=Config.total_steps)
    parser.add_argument("--no-stop", action="store_true",
                        help="keep training after reaching the target")
    parser.add_argument("--plot", default="ppo_cartpole.png", help="learning-curve image")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override Config fields, e.g. --set lam=0 ent_coef=0.0")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a 64-unit MLP is fastest on one thread
    ppo = importlib.import_module(args.module)
    overrides = dict(parse_override(item) for item in args.set)
    config = Config(**{"total_steps": args.steps, "stop_at_target": not args.no_stop,
                       **overrides})
    results = []
    for seed in args.seed:
        print(f"-- seed {seed}: PPO on CartPole-v1 with {args.module}")
        res = train(ppo, seed, config)
        results.append(res)
        verdict = (f"reached {config.target_return:g} at step {res.solved_at_step}"
                   if res.solved_at_step is not None else
                   f"did not reach {config.target_return:g} in {res.steps} steps")
        print(f"-- seed {seed}: {verdict} ({res.wall_s:.1f} s)")
    plot(results, args.plot, config)
    print(f"learning curve written to {args.plot}")
    return 0 if all(r.solved_at_step is not None for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
