//! The seed's figures (2006): `usemem` in a cpuset of 43 of 64 fake
//! nodes, system time 32 s without the cpuset and 75 s with it, and
//! readprofile's ticks in `__cpuset_zone_allowed`.

use serde::Serialize;

/// The seed's system time without and with the cpuset, in seconds.
pub const SEED_SYSTEM_SECONDS: (f64, f64) = (32.0, 75.0);
/// readprofile ticks in `__cpuset_zone_allowed` in the seed's profile.
pub const SEED_CHECK_TICKS: f64 = 10_599.0;
/// The seed kernel's timer frequency (a tick is 4 ms).
pub const SEED_HZ: f64 = 250.0;

/// The seed's check time: its ticks at `HZ` (about 42 s).
pub fn seed_check_seconds() -> f64 {
    SEED_CHECK_TICKS / SEED_HZ
}

/// The seed's share of system time in the check (42.4 s of 75 s).
pub fn seed_check_share() -> f64 {
    seed_check_seconds() / SEED_SYSTEM_SECONDS.1
}

/// The seed's slowdown of the restricted run (75 s / 32 s).
pub fn seed_slowdown() -> f64 {
    SEED_SYSTEM_SECONDS.1 / SEED_SYSTEM_SECONDS.0
}

/// The seed's system times, as the report shows them.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SeedSystemSeconds {
    /// Without the cpuset.
    pub unrestricted: f64,
    /// With it.
    pub restricted: f64,
}

/// The seed's figures beside the 2.6.18 row.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CpusetSeed {
    /// Its system times.
    pub system_seconds: SeedSystemSeconds,
    /// Restricted over unrestricted.
    pub slowdown: f64,
    /// readprofile ticks in the check.
    pub check_ticks: f64,
    /// Its timer frequency.
    pub hz: f64,
    /// The check's seconds.
    pub check_seconds: f64,
    /// The check's share of the restricted system time.
    pub check_share: f64,
}

impl CpusetSeed {
    /// The seed's figures.
    pub fn figures() -> CpusetSeed {
        CpusetSeed {
            system_seconds: SeedSystemSeconds {
                unrestricted: SEED_SYSTEM_SECONDS.0,
                restricted: SEED_SYSTEM_SECONDS.1,
            },
            slowdown: seed_slowdown(),
            check_ticks: SEED_CHECK_TICKS,
            hz: SEED_HZ,
            check_seconds: seed_check_seconds(),
            check_share: seed_check_share(),
        }
    }
}
