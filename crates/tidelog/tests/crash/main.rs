//! Kill -9 campaigns: children of this binary SIGKILLed at random moments
//! (`TIDELOG_CRASH_CYCLES`, `TIDELOG_CRASH_SEED`, `scripts/crash-campaign.sh`), atomic batches
//! under kill -9, and the lock released while another thread spawns processes.
//!
//! One module per test file; `common` holds the helpers all the test binaries share.

#[path = "../common/mod.rs"]
mod common;

mod batch_atomic_crash;
mod crash_kill9;
mod crash_races;
mod delete_kill9;
mod follow_kill9;
mod leader_kill9;
mod power_loss_processes;
mod publish_kill9;
mod reopen_while_spawning;
mod shadow;
