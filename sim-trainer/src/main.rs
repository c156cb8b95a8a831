//! `podq-sim-trainer`: the stand-in for the user's JAX trainer (see docs/trainer.md). The
//! same code runs as `podq sim-trainer`, which is what `podq up` launches.

fn main() {
    podq_sim_trainer::main_with_args(std::env::args().collect())
}
