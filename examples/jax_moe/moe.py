"""A DeepSeek-style Mixture-of-Experts layer in JAX whose expert matmuls are gmm-gen's Pallas
modules, on one device or with its experts sharded over a device mesh (expert parallelism).

The layer (x [T, D] -> [T, D]):
  route     scores = sigmoid(x @ gate); each token picks the top_k experts of scores + bias (the
            bias steers the choice only, as in DeepSeek's auxiliary-loss-free balancing) and
            weights them by its scores of those experts, normalized to sum to `scale`;
  experts   the (token, expert) pairs sorted by expert, h = gmm(xs, w_in) with w_in [E, D, 2F]
            holding each expert's gate and up projections, a = silu(h[:, :F]) * h[:, F:],
            y = gmm(a, w_out) with w_out [E, F, D]: the module's differentiable_gmm, so jax.grad
            runs its dlhs and drhs kernels;
  combine   each token sums its experts' rows times its routing weights, plus a shared expert
            (the same SwiGLU block, dense, on every token).
No token is dropped.

Expert parallelism (moe_layer_ep): tokens and experts are split over the mesh axis "expert";
device i holds experts [i * E_local, (i + 1) * E_local). Each device routes its own tokens, sends
every pair's row to the device that holds the expert (dispatch), that device runs its experts
with group_offset = i * E_local on a module emitted with g_local = E_local (compute), and the rows
travel back to be combined (combine). The exchanges are jax.lax.all_to_all with a fixed capacity
of T_local * top_k rows per destination (every pair of a device may pick the same destination, so
nothing is ever dropped) and a mask (padding rows carry the expert id E_local, sort last and lie
past sum(group_sizes), so the kernels write zeros there). jax.lax.ragged_all_to_all would send only
the rows routed, but XLA's CPU backend does not implement it ("HLO opcode ragged-all-to-all is not
supported by XLA:CPU" on JAX 0.10.2). Multi-host runs need only jax.distributed.initialize()
before building the mesh: the mesh code is the same.
"""

import functools
import importlib.util
import json
import os
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

AXIS = "expert"


# ---- the modules ----------------------------------------------------------------------------

def module_specs(d, f, e, shards, dtype="f32"):
    """The gmm-gen specs the layer needs for each shard count in `shards` (1: one device): the
    up projection (K=D, N=2F) and the down projection (K=F, N=D), with g=E, g_local=E/shards."""
    specs = []
    for s in shards:
        check_expert_split(e, s)
        for k, n in ((d, 2 * f), (f, d)):
            specs.append(f"op=gmm,lhs={dtype},rhs={dtype},out={dtype},k={k},n={n},g={e},"
                         f"g_local={e // s},target=pallas")
    return specs


def emit_modules(gmm_gen, out_dir, d, f, e, shards):
    """Runs `gmm-gen emit` for module_specs(...) into out_dir and loads the modules: returns
    {shards: (up module, down module)}."""
    specs = module_specs(d, f, e, shards)
    cmd = [gmm_gen, "emit", "--out", out_dir]
    for s in specs:
        cmd += ["--spec", s]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr}")
    with open(os.path.join(out_dir, "manifest.json")) as file:
        kernels = json.load(file)["kernels"]
    loaded = {}
    for k in kernels:
        spec = importlib.util.spec_from_file_location(k["module"],
                                                      os.path.join(out_dir, k["files"][0]))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        loaded[(mod.K, mod.N, mod.G_LOCAL)] = mod
    return {s: (loaded[(d, 2 * f, e // s)], loaded[(f, d, e // s)]) for s in shards}


def check_expert_split(e, shards):
    if shards < 1 or e % shards != 0:
        raise ValueError(f"E={e} experts cannot be split over {shards} devices: the number of "
                         f"experts must be a multiple of the mesh's '{AXIS}' axis size")


def default_interpret():
    """The modules' interpret argument: compiled by Mosaic on a TPU; elsewhere Pallas's generic
    interpreter ("hlo"), which is about 15 times faster than TPU interpret mode and needs no host
    callbacks between devices."""
    return False if jax.default_backend() == "tpu" else "hlo"


# ---- the layer ------------------------------------------------------------------------------

def init_params(key, d, f, e, f_shared, dtype=jnp.float32):
    """Random parameters: gate [D, E], w_in [E, D, 2F], w_out [E, F, D], shared_in [D, 2Fs],
    shared_out [Fs, D]."""
    ks = jax.random.split(key, 5)
    normal = lambda k, shape, fan_in: jax.random.normal(k, shape, dtype) / np.sqrt(fan_in)
    return {"gate": normal(ks[0], (d, e), d),
            "w_in": normal(ks[1], (e, d, 2 * f), d),
            "w_out": normal(ks[2], (e, f, d), f),
            "shared_in": normal(ks[3], (d, 2 * f_shared), d),
            "shared_out": normal(ks[4], (f_shared, d), f_shared)}


def route(x, gate, bias, top_k, scale):
    """(experts [T, top_k] int32, weights [T, top_k]) of each token."""
    scores = jax.nn.sigmoid(x @ gate)
    _, experts = jax.lax.top_k(jax.lax.stop_gradient(scores) + bias, top_k)
    w = jnp.take_along_axis(scores, experts, axis=1)
    return experts.astype(jnp.int32), scale * w / jnp.sum(w, axis=1, keepdims=True)


def swiglu(h):
    f = h.shape[-1] // 2
    return jax.nn.silu(h[..., :f]) * h[..., f:]


def shared_expert(x, p):
    return swiglu(x @ p["shared_in"]) @ p["shared_out"]


def experts_ffn(xs, w_in, w_out, group_sizes, offset, mods, interpret):
    """The experts on rows sorted by expert: group_sizes has all E entries; w_in/w_out hold the
    G_local experts from `offset`. Rows past the active groups come out zero."""
    up, down = mods
    h = up.differentiable_gmm(xs, w_in, group_sizes, group_offset=offset, interpret=interpret)
    return down.differentiable_gmm(swiglu(h), w_out, group_sizes, group_offset=offset,
                                   interpret=interpret)


def combine(y_pairs, weights, x, p):
    """Each token's experts' rows (pair order: token-major) weighted, plus the shared expert."""
    t, top_k = weights.shape
    return jnp.sum(y_pairs.reshape(t, top_k, -1) * weights[..., None], axis=1) + shared_expert(x, p)


def moe_layer(p, x, bias, *, mods, top_k, scale=1.0, interpret=None):
    """The layer on one device; mods: the modules of one shard (g_local = E)."""
    e = p["w_in"].shape[0]
    _check_modules(mods, e, 1)
    interpret = default_interpret() if interpret is None else interpret
    experts, weights = route(x, p["gate"], bias, top_k, scale)
    flat = experts.reshape(-1)  # pair j: token j // top_k
    order = jnp.argsort(flat, stable=True)
    group_sizes = jnp.bincount(flat, length=e).astype(jnp.int32)
    ys = experts_ffn(x[order // top_k], p["w_in"], p["w_out"], group_sizes, 0, mods, interpret)
    return combine(jnp.zeros_like(ys).at[order].set(ys), weights, x, p)


def _check_modules(mods, e, shards):
    check_expert_split(e, shards)
    for mod in mods:
        if mod.G != e or mod.G_LOCAL != e // shards:
            raise ValueError(f"module {mod.NAME} has G={mod.G}, G_local={mod.G_LOCAL}; the layer "
                             f"needs G=E={e} and G_local=E/devices={e // shards}")


def param_specs(p):
    """How the parameters lie on the mesh: experts split over AXIS, the rest on every device."""
    return {k: P(AXIS) if k in ("w_in", "w_out") else P() for k in p}


def moe_layer_ep(p, x, bias, *, mesh, mods, top_k, scale=1.0, interpret=None):
    """The layer with tokens and experts split over mesh axis AXIS; mods: the modules of that
    shard count. Returns the output [T, D], split like x."""
    return combine_ep(*compute_ep(*dispatch_ep(p, x, bias, mesh=mesh, mods=mods, top_k=top_k,
                                               scale=scale), p, mesh=mesh, mods=mods,
                                  interpret=interpret), p, x, mesh=mesh)


def _devices(mesh, e, t, mods):
    n = mesh.shape[AXIS]
    _check_modules(mods, e, n)
    if t % n != 0:
        raise ValueError(f"T={t} tokens cannot be split over {n} devices: T must be a multiple "
                         f"of the mesh's '{AXIS}' axis size")
    return n


def _shard(mesh, in_specs, out_specs):
    # check_vma=False: the modules' pallas_call does not declare how its output varies over the
    # mesh axes.
    return functools.partial(jax.shard_map, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=False)


def dispatch_ep(p, x, bias, *, mesh, mods, top_k, scale=1.0):
    """Routes each device's tokens and sends every (token, expert) pair's row to the device that
    holds the expert. Returns (rows [n * n * C, D], ids [n * n * C] local expert or E_local for
    padding, pair slots, weights): per device, C = T_local * top_k rows from each source."""
    e = p["w_in"].shape[0]
    n = _devices(mesh, e, x.shape[0], mods)
    e_local = e // n

    @_shard(mesh, (P(), P(AXIS), P()), (P(AXIS),) * 4)
    def body(gate, x, bias):
        t, d = x.shape
        cap = t * top_k
        experts, weights = route(x, gate, bias, top_k, scale)
        flat = experts.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        ordered = flat[order]
        dest = ordered // e_local
        per_dest = jnp.bincount(dest, length=n)
        slot = jnp.arange(cap) - (jnp.cumsum(per_dest) - per_dest)[dest]
        send = jnp.zeros((n, cap, d), x.dtype).at[dest, slot].set(x[order // top_k])
        ids = jnp.full((n, cap), e_local, jnp.int32).at[dest, slot].set(ordered % e_local)
        rows = jax.lax.all_to_all(send, AXIS, 0, 0)  # rows[s]: what device s sent here
        ids = jax.lax.all_to_all(ids, AXIS, 0, 0)
        where = jnp.zeros(cap, jnp.int32).at[order].set(dest * cap + slot)  # pair -> its slot
        return rows.reshape(n * cap, d), ids.reshape(-1), where, weights

    return body(p["gate"], x, bias)


def compute_ep(rows, ids, where, weights, p, *, mesh, mods, interpret=None):
    """Each device runs its experts on the rows it received. Returns (rows [n * n * C, D] in the
    order received, where, weights)."""
    e = p["w_in"].shape[0]
    n = mesh.shape[AXIS]
    e_local = e // n
    interpret = default_interpret() if interpret is None else interpret

    @_shard(mesh, (P(AXIS), P(AXIS), P(AXIS), P(AXIS)), P(AXIS))
    def body(rows, ids, w_in, w_out):
        order = jnp.argsort(ids, stable=True)  # by local expert; the padding last
        local = jnp.bincount(ids, length=e_local + 1)[:e_local].astype(jnp.int32)
        first = jax.lax.axis_index(AXIS) * e_local
        group_sizes = jax.lax.dynamic_update_slice(jnp.zeros(e, jnp.int32), local, (first,))
        ys = experts_ffn(rows[order], w_in, w_out, group_sizes, first, mods, interpret)
        return jnp.zeros_like(ys).at[order].set(ys)

    return body(rows, ids, p["w_in"], p["w_out"]), where, weights


def combine_ep(rows, where, weights, p, x, *, mesh):
    """Sends the experts' rows back to the devices of their tokens and combines them."""
    n = mesh.shape[AXIS]

    @_shard(mesh, (P(AXIS), P(AXIS), P(AXIS), P(), P(), P(AXIS)), P(AXIS))
    def body(rows, where, weights, shared_in, shared_out, x):
        back = jax.lax.all_to_all(rows.reshape(n, -1, rows.shape[-1]), AXIS, 0, 0)
        y_pairs = back.reshape(-1, rows.shape[-1])[where]
        return combine(y_pairs, weights, x, {"shared_in": shared_in, "shared_out": shared_out})

    return body(rows, where, weights, p["shared_in"], p["shared_out"], x)


# ---- the reference and training -------------------------------------------------------------

def dense_reference(p, x, bias, *, top_k, scale=1.0):
    """The same layer, every expert on every token with einsum, in x's dtype (float64 under
    jax.enable_x64 for the checks)."""
    experts, weights = route(x, p["gate"], bias, top_k, scale)
    t, e = x.shape[0], p["gate"].shape[1]
    mix = jnp.zeros((t, e), x.dtype).at[jnp.arange(t)[:, None], experts].set(weights)
    y = jnp.einsum("etf,efd->etd", swiglu(jnp.einsum("td,edf->etf", x, p["w_in"])), p["w_out"])
    return jnp.einsum("te,etd->td", mix, y) + shared_expert(x, p)


def loss_fn(layer):
    """Mean squared error of layer(p, x, bias) against a target."""
    return lambda p, x, bias, target: 0.5 * jnp.mean((layer(p, x, bias) - target) ** 2)


def sgd_step(layer, lr):
    """One training step: (loss, gradients, updated parameters)."""
    loss = loss_fn(layer)

    def step(p, x, bias, target):
        value, grads = jax.value_and_grad(loss)(p, x, bias, target)
        return value, grads, jax.tree_util.tree_map(lambda w, g: w - lr * g, p, grads)

    return step


def make_mesh(devices):
    """A 1-D mesh over the first `devices` devices, axis AXIS."""
    have = jax.devices()
    if devices > len(have):
        raise ValueError(f"a mesh of {devices} devices needs that many; JAX sees {len(have)} (on "
                         f"the CPU: XLA_FLAGS=--xla_force_host_platform_device_count={devices})")
    return Mesh(np.array(have[:devices]), (AXIS,))
