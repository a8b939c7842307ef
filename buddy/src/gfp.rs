//! GFP flags (`gfp_t`) with the kernel's bits and compositions, and what
//! `prepare_alloc_pages` derives from them: the highest zone
//! (`gfp_zone`), the migratetype (`gfp_migratetype`) and the allocation
//! flags (`gfp_to_alloc_flags`).
//!
//! The bit values are Linux 6.18's (`include/linux/gfp_types.h`, where bit
//! 9 is unused since `__GFP_ATOMIC` went in 6.3), so a mask printed by the
//! kernel's tracepoints means the same here. [`Gfp`]'s `Display` and
//! `FromStr` use the names `show_gfp_flags` prints: compositions first
//! (`GFP_KERNEL|__GFP_ZERO`), a hex remainder for unnamed bits.
//!
//! The kernel keeps these as a bare integer; pfnlab wraps it so a request
//! cannot be confused with an order or a count. The name table is written
//! out here rather than derived with `bitflags`, because the kernel's
//! names (`__GFP_ZERO`, `GFP_HIGHUSER_MOVABLE`) and its print order are the
//! point: they are what a recorded trace contains.

use std::fmt;
use std::ops::BitOr;
use std::str::FromStr;

use sparsemem::{Migratetype, Order};

use crate::types::{HighatomicRules, MAX_NR_ZONES, ZoneType};

/// A GFP mask; see the module documentation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gfp(u32);

impl Gfp {
    /// `__GFP_DMA`: ZONE_DMA (`GFP_DMA`).
    pub const DMA: Gfp = Gfp(1 << 0);
    /// `__GFP_HIGHMEM`: ZONE_HIGHMEM, which 64-bit kernels fold into
    /// ZONE_NORMAL.
    pub const HIGHMEM: Gfp = Gfp(1 << 1);
    /// `__GFP_DMA32`: ZONE_DMA32 (`GFP_DMA32`).
    pub const DMA32: Gfp = Gfp(1 << 2);
    /// `__GFP_MOVABLE`: movable memory (MIGRATE_MOVABLE; with
    /// `__GFP_HIGHMEM`, ZONE_MOVABLE).
    pub const MOVABLE: Gfp = Gfp(1 << 3);
    /// `__GFP_RECLAIMABLE`: MIGRATE_RECLAIMABLE.
    pub const RECLAIMABLE: Gfp = Gfp(1 << 4);
    /// `__GFP_HIGH`: may use part of the reserve below `min`.
    pub const HIGH: Gfp = Gfp(1 << 5);
    /// `__GFP_IO`.
    pub const IO: Gfp = Gfp(1 << 6);
    /// `__GFP_FS`.
    pub const FS: Gfp = Gfp(1 << 7);
    /// `__GFP_ZERO`: return zeroed memory.
    pub const ZERO: Gfp = Gfp(1 << 8);
    /// `__GFP_DIRECT_RECLAIM`: the caller may sleep and reclaim.
    pub const DIRECT_RECLAIM: Gfp = Gfp(1 << 10);
    /// `__GFP_KSWAPD_RECLAIM`: wake kswapd below the low watermark.
    pub const KSWAPD_RECLAIM: Gfp = Gfp(1 << 11);
    /// `__GFP_WRITE`.
    pub const WRITE: Gfp = Gfp(1 << 12);
    /// `__GFP_NOWARN`.
    pub const NOWARN: Gfp = Gfp(1 << 13);
    /// `__GFP_RETRY_MAYFAIL`.
    pub const RETRY_MAYFAIL: Gfp = Gfp(1 << 14);
    /// `__GFP_NOFAIL`.
    pub const NOFAIL: Gfp = Gfp(1 << 15);
    /// `__GFP_NORETRY`.
    pub const NORETRY: Gfp = Gfp(1 << 16);
    /// `__GFP_MEMALLOC`: ignore the watermarks (`ALLOC_NO_WATERMARKS`).
    pub const MEMALLOC: Gfp = Gfp(1 << 17);
    /// `__GFP_COMP`: a compound page (head and tails written).
    pub const COMP: Gfp = Gfp(1 << 18);
    /// `__GFP_NOMEMALLOC`: never ignore the watermarks.
    pub const NOMEMALLOC: Gfp = Gfp(1 << 19);
    /// `__GFP_HARDWALL`: the cpuset's nodes only.
    pub const HARDWALL: Gfp = Gfp(1 << 20);
    /// `__GFP_THISNODE`: no fallback to other nodes.
    pub const THISNODE: Gfp = Gfp(1 << 21);
    /// `__GFP_ACCOUNT`.
    pub const ACCOUNT: Gfp = Gfp(1 << 22);
    /// `__GFP_ZEROTAGS`.
    pub const ZEROTAGS: Gfp = Gfp(1 << 23);
    /// `__GFP_NO_OBJ_EXT` (6.10+): no slab object extension vector.
    pub const NO_OBJ_EXT: Gfp = Gfp(1 << 24);

    /// `__GFP_RECLAIM`: direct and kswapd reclaim.
    pub const RECLAIM: Gfp = Gfp(Gfp::DIRECT_RECLAIM.0 | Gfp::KSWAPD_RECLAIM.0);
    /// `GFP_ATOMIC`: no sleeping, part of the reserve.
    pub const ATOMIC: Gfp = Gfp(Gfp::HIGH.0 | Gfp::KSWAPD_RECLAIM.0);
    /// `GFP_KERNEL`.
    pub const KERNEL: Gfp = Gfp(Gfp::RECLAIM.0 | Gfp::IO.0 | Gfp::FS.0);
    /// `GFP_KERNEL_ACCOUNT`.
    pub const KERNEL_ACCOUNT: Gfp = Gfp(Gfp::KERNEL.0 | Gfp::ACCOUNT.0);
    /// `GFP_NOWAIT`.
    pub const NOWAIT: Gfp = Gfp::KSWAPD_RECLAIM;
    /// `GFP_NOIO`.
    pub const NOIO: Gfp = Gfp::RECLAIM;
    /// `GFP_NOFS`.
    pub const NOFS: Gfp = Gfp(Gfp::RECLAIM.0 | Gfp::IO.0);
    /// `GFP_USER`.
    pub const USER: Gfp = Gfp(Gfp::KERNEL.0 | Gfp::HARDWALL.0);
    /// `GFP_HIGHUSER`.
    pub const HIGHUSER: Gfp = Gfp(Gfp::USER.0 | Gfp::HIGHMEM.0);
    /// `GFP_HIGHUSER_MOVABLE`: user pages, any zone up to ZONE_MOVABLE.
    pub const HIGHUSER_MOVABLE: Gfp = Gfp(Gfp::HIGHUSER.0 | Gfp::MOVABLE.0);
    /// `GFP_TRANSHUGE_LIGHT`: a THP without reclaim.
    pub const TRANSHUGE_LIGHT: Gfp = Gfp((Gfp::HIGHUSER_MOVABLE.0
        | Gfp::COMP.0
        | Gfp::NOMEMALLOC.0
        | Gfp::NOWARN.0)
        & !Gfp::RECLAIM.0);
    /// `GFP_TRANSHUGE`.
    pub const TRANSHUGE: Gfp = Gfp(Gfp::TRANSHUGE_LIGHT.0 | Gfp::DIRECT_RECLAIM.0);

    /// Every bit pfnlab knows (`__GFP_BITS_MASK` less the debugging bits).
    pub const KNOWN: Gfp = Gfp((1 << 25) - 1 - (1 << 9));

    /// The raw mask.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// A mask from raw bits, or `None` if a bit is not one pfnlab knows.
    pub const fn from_bits(bits: u32) -> Option<Gfp> {
        if bits & !Gfp::KNOWN.0 == 0 {
            Some(Gfp(bits))
        } else {
            None
        }
    }

    /// Both masks' bits.
    pub const fn union(self, other: Gfp) -> Gfp {
        Gfp(self.0 | other.0)
    }

    /// `gfp_pfmemalloc_allowed` for the mask alone: `__GFP_MEMALLOC`
    /// without `__GFP_NOMEMALLOC`, a request that may ignore the
    /// watermarks.
    pub const fn pfmemalloc_allowed(self) -> bool {
        self.0 & Gfp::MEMALLOC.0 != 0 && self.0 & Gfp::NOMEMALLOC.0 == 0
    }

    /// This mask without `other`'s bits.
    pub const fn without(self, other: Gfp) -> Gfp {
        Gfp(self.0 & !other.0)
    }

    /// Whether every bit of `other` is set.
    #[inline(always)]
    pub const fn contains(self, other: Gfp) -> bool {
        self.0 & other.0 == other.0
    }

    /// The same request with `__GFP_THISNODE`.
    pub const fn thisnode(self) -> Gfp {
        self.union(Gfp::THISNODE)
    }

    /// `gfp_zone`: the highest zone the request may use, from its four
    /// zone modifier bits (`GFP_ZONE_TABLE` on a 64-bit kernel, where
    /// highmem is ZONE_NORMAL), or why the combination is invalid
    /// (`GFP_ZONE_BAD`: two zone modifiers at once).
    #[inline(always)]
    pub fn gfp_zone(self) -> Result<ZoneType, GfpError> {
        let bits = self.0 & GFP_ZONEMASK;
        if GFP_ZONE_BAD >> bits & 1 != 0 {
            return Err(GfpError::ZoneModifiers(self));
        }
        Ok(ZONE_TYPES[(GFP_ZONE_TABLE >> (bits * GFP_ZONES_SHIFT) & 3) as usize])
    }

    /// `gfp_migratetype`: `__GFP_MOVABLE` → Movable, `__GFP_RECLAIMABLE` →
    /// Reclaimable, neither → Unmovable (the two bits shifted down, as the
    /// kernel reads them); both at once is invalid (the kernel warns).
    #[inline(always)]
    pub fn gfp_migratetype(self) -> Result<Migratetype, GfpError> {
        match (self.0 & GFP_MOVABLE_MASK) >> GFP_MOVABLE_SHIFT {
            0 => Ok(Migratetype::Unmovable),
            1 => Ok(Migratetype::Movable),
            2 => Ok(Migratetype::Reclaimable),
            _ => Err(GfpError::MovableAndReclaimable(self)),
        }
    }

    /// The migratetype of a valid request (Unmovable for an invalid one;
    /// the allocation paths refuse those first).
    #[inline(always)]
    pub fn migratetype(self) -> Migratetype {
        self.gfp_migratetype().unwrap_or(Migratetype::Unmovable)
    }
}

/// The zone modifier bits (`GFP_ZONEMASK`).
const GFP_ZONEMASK: u32 = Gfp::DMA.0 | Gfp::HIGHMEM.0 | Gfp::DMA32.0 | Gfp::MOVABLE.0;

/// Bits per entry of [`GFP_ZONE_TABLE`] (`GFP_ZONES_SHIFT`; 2 on a kernel
/// with at most four zones, as pfnlab's).
const GFP_ZONES_SHIFT: u32 = 2;

/// `GFP_ZONE_TABLE`: the zone of each combination of zone modifiers, one
/// [`GFP_ZONES_SHIFT`]-bit entry per combination (an index into
/// [`ZONE_TYPES`]). Highmem is ZONE_NORMAL on 64-bit; `__GFP_MOVABLE` alone
/// stays in Normal and with highmem means ZONE_MOVABLE.
const GFP_ZONE_TABLE: u64 = {
    const fn entry(bits: u32, zone: ZoneType) -> u64 {
        (zone as u64) << (bits * GFP_ZONES_SHIFT)
    }
    let (dma, highmem, dma32, movable) = (Gfp::DMA.0, Gfp::HIGHMEM.0, Gfp::DMA32.0, Gfp::MOVABLE.0);
    entry(0, ZoneType::Normal)
        | entry(dma, ZoneType::Dma)
        | entry(highmem, ZoneType::Normal)
        | entry(dma32, ZoneType::Dma32)
        | entry(movable, ZoneType::Normal)
        | entry(movable | dma, ZoneType::Dma)
        | entry(movable | highmem, ZoneType::Movable)
        | entry(movable | dma32, ZoneType::Dma32)
};

/// `GFP_ZONE_BAD`: the combinations with two zone modifiers at once, one
/// bit each.
const GFP_ZONE_BAD: u32 = {
    let (dma, highmem, dma32, movable) = (Gfp::DMA.0, Gfp::HIGHMEM.0, Gfp::DMA32.0, Gfp::MOVABLE.0);
    1 << (dma | highmem)
        | 1 << (dma | dma32)
        | 1 << (dma32 | highmem)
        | 1 << (dma | dma32 | highmem)
        | 1 << (movable | highmem | dma)
        | 1 << (movable | dma | dma32)
        | 1 << (movable | dma32 | highmem)
        | 1 << (movable | dma | dma32 | highmem)
};

/// The zone types by their `GFP_ZONE_TABLE` entry.
const ZONE_TYPES: [ZoneType; MAX_NR_ZONES] = ZoneType::ALL;

/// `GFP_MOVABLE_MASK` and `GFP_MOVABLE_SHIFT`: the two mobility bits.
const GFP_MOVABLE_MASK: u32 = Gfp::RECLAIMABLE.0 | Gfp::MOVABLE.0;
const GFP_MOVABLE_SHIFT: u32 = 3;
const _: () = assert!(Gfp::MOVABLE.0 >> GFP_MOVABLE_SHIFT == Migratetype::Movable as u32);
const _: () = assert!(Gfp::RECLAIMABLE.0 >> GFP_MOVABLE_SHIFT == Migratetype::Reclaimable as u32);

impl BitOr for Gfp {
    type Output = Gfp;
    fn bitor(self, rhs: Gfp) -> Gfp {
        self.union(rhs)
    }
}

/// Why a GFP mask cannot be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GfpError {
    /// Two zone modifiers at once (`GFP_ZONE_BAD`).
    ZoneModifiers(Gfp),
    /// `__GFP_MOVABLE` and `__GFP_RECLAIMABLE` together.
    MovableAndReclaimable(Gfp),
}

impl fmt::Display for GfpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GfpError::ZoneModifiers(g) => {
                write!(f, "gfp {g} names two zones at once (GFP_ZONE_BAD)")
            }
            GfpError::MovableAndReclaimable(g) => {
                write!(f, "gfp {g} is both __GFP_MOVABLE and __GFP_RECLAIMABLE")
            }
        }
    }
}

impl std::error::Error for GfpError {}

/// The names `show_gfp_flags` prints, in its order: compositions before
/// the bits they contain.
const NAMES: &[(&str, Gfp)] = &[
    ("GFP_TRANSHUGE", Gfp::TRANSHUGE),
    ("GFP_TRANSHUGE_LIGHT", Gfp::TRANSHUGE_LIGHT),
    ("GFP_HIGHUSER_MOVABLE", Gfp::HIGHUSER_MOVABLE),
    ("GFP_HIGHUSER", Gfp::HIGHUSER),
    ("GFP_USER", Gfp::USER),
    ("GFP_KERNEL_ACCOUNT", Gfp::KERNEL_ACCOUNT),
    ("GFP_KERNEL", Gfp::KERNEL),
    ("GFP_NOFS", Gfp::NOFS),
    ("GFP_ATOMIC", Gfp::ATOMIC),
    ("GFP_NOIO", Gfp::NOIO),
    ("GFP_NOWAIT", Gfp::NOWAIT),
    ("GFP_DMA", Gfp::DMA),
    ("__GFP_HIGHMEM", Gfp::HIGHMEM),
    ("GFP_DMA32", Gfp::DMA32),
    ("__GFP_HIGH", Gfp::HIGH),
    ("__GFP_IO", Gfp::IO),
    ("__GFP_FS", Gfp::FS),
    ("__GFP_NOWARN", Gfp::NOWARN),
    ("__GFP_RETRY_MAYFAIL", Gfp::RETRY_MAYFAIL),
    ("__GFP_NOFAIL", Gfp::NOFAIL),
    ("__GFP_NORETRY", Gfp::NORETRY),
    ("__GFP_COMP", Gfp::COMP),
    ("__GFP_ZERO", Gfp::ZERO),
    ("__GFP_NOMEMALLOC", Gfp::NOMEMALLOC),
    ("__GFP_MEMALLOC", Gfp::MEMALLOC),
    ("__GFP_HARDWALL", Gfp::HARDWALL),
    ("__GFP_THISNODE", Gfp::THISNODE),
    ("__GFP_RECLAIMABLE", Gfp::RECLAIMABLE),
    ("__GFP_MOVABLE", Gfp::MOVABLE),
    ("__GFP_ACCOUNT", Gfp::ACCOUNT),
    ("__GFP_WRITE", Gfp::WRITE),
    ("__GFP_RECLAIM", Gfp::RECLAIM),
    ("__GFP_DIRECT_RECLAIM", Gfp::DIRECT_RECLAIM),
    ("__GFP_KSWAPD_RECLAIM", Gfp::KSWAPD_RECLAIM),
    ("__GFP_ZEROTAGS", Gfp::ZEROTAGS),
    ("__GFP_NO_OBJ_EXT", Gfp::NO_OBJ_EXT),
];

/// Names the kernel's table also lists but which [`Gfp`]'s `Display`
/// never prints first (the `GFP_` name of the same bit wins): accepted
/// when parsing trace output.
const ALIASES: &[(&str, Gfp)] = &[("__GFP_DMA", Gfp::DMA), ("__GFP_DMA32", Gfp::DMA32)];

impl fmt::Display for Gfp {
    /// `show_gfp_flags`'s form: names joined by `|`, a hex remainder for
    /// unnamed bits, `none` for an empty mask.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        let mut rest = self.0;
        let mut first = true;
        for &(name, g) in NAMES {
            if g.0 != 0 && rest & g.0 == g.0 {
                rest &= !g.0;
                f.write_str(if first { "" } else { "|" })?;
                f.write_str(name)?;
                first = false;
            }
        }
        if rest != 0 {
            write!(f, "{}{rest:#x}", if first { "" } else { "|" })?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gfp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gfp({self})")
    }
}

/// A GFP mask that does not parse: the mask as given and the part of it
/// that is neither a flag name nor a hex number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseGfpError {
    mask: String,
    part: String,
    bad_hex: bool,
}

impl fmt::Display for ParseGfpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.bad_hex { "bad" } else { "unknown" };
        write!(f, "{what} gfp flag `{}` in `{}`", self.part, self.mask)
    }
}

impl std::error::Error for ParseGfpError {}

impl FromStr for Gfp {
    type Err = ParseGfpError;

    /// Parses [`Gfp`]'s `Display` form (the kernel's trace output): names
    /// and hex numbers joined by `|`, or `none`.
    fn from_str(s: &str) -> Result<Gfp, ParseGfpError> {
        let s = s.trim();
        let refuse = |part: &str, bad_hex| ParseGfpError {
            mask: s.to_owned(),
            part: part.to_owned(),
            bad_hex,
        };
        if s == "none" || s == "0" {
            return Ok(Gfp(0));
        }
        let mut bits = 0u32;
        for part in s.split('|') {
            let part = part.trim();
            if let Some(&(_, g)) = NAMES.iter().chain(ALIASES).find(|(name, _)| *name == part) {
                bits |= g.0;
            } else if let Some(hex) = part.strip_prefix("0x") {
                bits |= u32::from_str_radix(hex, 16).map_err(|_| refuse(part, true))?;
            } else {
                return Err(refuse(part, false));
            }
        }
        Ok(Gfp(bits))
    }
}

/// `ALLOC_*` flags: how hard an allocation may dig into the reserves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct AllocFlags {
    /// The watermark to test, or `None` for `ALLOC_NO_WATERMARKS`.
    pub(crate) wmark: Option<Wmark>,
    /// `ALLOC_MIN_RESERVE` (`__GFP_HIGH`): `min` halved.
    pub(crate) min_reserve: bool,
    /// `ALLOC_NON_BLOCK` (no direct reclaim): `min` less a quarter.
    pub(crate) non_block: bool,
    /// May count the `MIGRATE_HIGHATOMIC` reserve as free in the watermark
    /// check (`ALLOC_RESERVES` from 6.3, `ALLOC_HARDER|ALLOC_OOM` before).
    pub(crate) reserves: bool,
    /// `ALLOC_HIGHATOMIC` (before 6.3: `ALLOC_HARDER` at order > 0): takes
    /// from the reserve first, and reserves a pageblock on success.
    pub(crate) highatomic: bool,
    /// 6.3 on: a non-blocking request whose own lists failed may take from
    /// the reserve (`rmqueue_buddy`'s `ALLOC_OOM|ALLOC_NON_BLOCK` retry).
    pub(crate) highatomic_fallback: bool,
}

/// Which watermark an allocation tests (`ALLOC_WMARK_MIN/LOW/HIGH`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Wmark {
    Min,
    Low,
}

impl AllocFlags {
    /// The fast path's flags (`ALLOC_WMARK_LOW`).
    pub(crate) const FAST: AllocFlags = AllocFlags {
        wmark: Some(Wmark::Low),
        min_reserve: false,
        non_block: false,
        reserves: false,
        highatomic: false,
        highatomic_fallback: false,
    };

    /// `alloc_pages_nolock`'s flags: `ALLOC_TRYLOCK` alone (Linux 6.15,
    /// commit 97769a53f117), so the min watermark (`ALLOC_WMARK_MIN` is 0)
    /// with no reserve. The trylock itself is the path's, not a flag here.
    pub(crate) const TRYLOCK: AllocFlags = AllocFlags {
        wmark: Some(Wmark::Min),
        min_reserve: false,
        non_block: false,
        reserves: false,
        highatomic: false,
        highatomic_fallback: false,
    };

    /// No watermark at all (`ALLOC_NO_WATERMARKS`).
    pub(crate) const NO_WATERMARKS: AllocFlags = AllocFlags {
        wmark: None,
        min_reserve: false,
        non_block: false,
        reserves: false,
        highatomic: false,
        highatomic_fallback: false,
    };

    /// `gfp_to_alloc_flags` for the slow path: the `min` watermark, the
    /// reserves `__GFP_HIGH` and non-blocking requests may use, and no
    /// watermark at all for `__GFP_MEMALLOC` (`gfp_pfmemalloc_allowed`)
    /// unless `__GFP_NOMEMALLOC`; and, for an `order` request under
    /// `rules`, the `MIGRATE_HIGHATOMIC` reserve's flags.
    ///
    /// The reserve is for the `GFP_ATOMIC` shape: `__GFP_HIGH` without
    /// `__GFP_DIRECT_RECLAIM` or `__GFP_NOMEMALLOC`, at order > 0 — 6.3's
    /// `ALLOC_HIGHATOMIC`, and before it `ALLOC_HARDER` from
    /// `__GFP_ATOMIC`, a bit that only `GFP_ATOMIC` carried and that
    /// pfnlab's 6.18 masks do not have, so its shape stands for it. The
    /// watermark lets `ALLOC_RESERVES` (6.3: non-blocking or `__GFP_HIGH`)
    /// count the reserve, and before 6.3 only `ALLOC_HARDER`.
    pub(crate) fn slow(gfp: Gfp, order: Order, rules: HighatomicRules) -> AllocFlags {
        let no_wmarks = gfp.pfmemalloc_allowed();
        let min_reserve = gfp.contains(Gfp::HIGH);
        let non_block = !gfp.contains(Gfp::DIRECT_RECLAIM) && !gfp.contains(Gfp::NOMEMALLOC);
        let atomic = min_reserve && non_block;
        let (reserves, highatomic_fallback) = match rules {
            HighatomicRules::None => (false, false),
            HighatomicRules::Harder => (atomic, false),
            HighatomicRules::HighAtomic => (min_reserve || non_block, non_block),
        };
        AllocFlags {
            wmark: if no_wmarks { None } else { Some(Wmark::Min) },
            min_reserve,
            non_block,
            reserves,
            highatomic: rules != HighatomicRules::None && atomic && order > Order::ZERO,
            highatomic_fallback,
        }
    }
}

/// What `prepare_alloc_pages` derives from a request, once per call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AllocContext {
    pub(crate) gfp: Gfp,
    pub(crate) highest_zone: ZoneType,
    pub(crate) migratetype: Migratetype,
    /// `ALLOC_NOFRAGMENT`, which the kernel keeps in `alloc_flags` beside
    /// its context: no fallback but a whole free pageblock's
    /// (`zone::fallback`). Set by `alloc_flags_nofragment` and
    /// `gfp_to_alloc_flags` under `vm.defrag_mode`; the slow path clears
    /// it for its last retry.
    pub(crate) nofragment: bool,
    /// Whether the slow path may drop [`AllocContext::nofragment`] for its
    /// last retry: false for a caller that compacts first and asks again
    /// itself (`alloc_pages_direct_compact`).
    pub(crate) defrag_retry: bool,
}

impl AllocContext {
    /// `prepare_alloc_pages`: the request's zone limit and migratetype, or
    /// why the mask is invalid. Without grouping by mobility (before
    /// 2.6.24, `page_group_by_mobility_disabled`) everything is one list.
    #[inline(always)]
    pub(crate) fn new(gfp: Gfp, mobility: bool) -> Result<AllocContext, GfpError> {
        let highest_zone = gfp.gfp_zone()?;
        let migratetype = gfp.gfp_migratetype()?;
        Ok(AllocContext {
            gfp,
            highest_zone,
            migratetype: if mobility {
                migratetype
            } else {
                Migratetype::Movable
            },
            nofragment: false,
            defrag_retry: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table lookup against the zone modifiers' meaning spelled out.
    #[test]
    fn gfp_zone_table_matches_every_combination() {
        let (dma, highmem, dma32, movable) = (1, 2, 4, 8);
        for bits in 0..16u32 {
            let expected = match bits {
                0 => Some(ZoneType::Normal),
                b if b == highmem || b == movable => Some(ZoneType::Normal),
                b if b == dma || b == movable | dma => Some(ZoneType::Dma),
                b if b == dma32 || b == movable | dma32 => Some(ZoneType::Dma32),
                b if b == movable | highmem => Some(ZoneType::Movable),
                _ => None,
            };
            let gfp = Gfp::from_bits(bits | Gfp::KERNEL.bits()).unwrap();
            assert_eq!(gfp.gfp_zone().ok(), expected, "zone modifiers {bits:#x}");
        }
    }

    #[test]
    fn compositions_and_zones_are_the_kernels() {
        assert_eq!(Gfp::KERNEL.bits(), 0xcc0);
        assert_eq!(Gfp::HIGHUSER_MOVABLE.bits(), 0x100cca);
        assert_eq!(Gfp::ATOMIC.bits(), 0x820);
        assert_eq!(Gfp::KERNEL.gfp_zone(), Ok(ZoneType::Normal));
        assert_eq!(Gfp::HIGHUSER_MOVABLE.gfp_zone(), Ok(ZoneType::Movable));
        assert_eq!((Gfp::KERNEL | Gfp::DMA32).gfp_zone(), Ok(ZoneType::Dma32));
        assert_eq!(
            (Gfp::KERNEL | Gfp::MOVABLE).gfp_zone(),
            Ok(ZoneType::Normal)
        );
        assert!((Gfp::DMA | Gfp::DMA32).gfp_zone().is_err());
        assert!(
            (Gfp::DMA32 | Gfp::HIGHMEM | Gfp::MOVABLE)
                .gfp_zone()
                .is_err()
        );
        assert_eq!(Gfp::KERNEL.gfp_migratetype(), Ok(Migratetype::Unmovable));
        assert_eq!(Gfp::HIGHUSER_MOVABLE.migratetype(), Migratetype::Movable);
        assert_eq!(
            (Gfp::KERNEL | Gfp::RECLAIMABLE).gfp_migratetype(),
            Ok(Migratetype::Reclaimable)
        );
        assert!((Gfp::MOVABLE | Gfp::RECLAIMABLE).gfp_migratetype().is_err());
    }

    #[test]
    fn names_print_and_parse_as_the_trace_does() {
        assert_eq!(Gfp::KERNEL.to_string(), "GFP_KERNEL");
        assert_eq!(
            (Gfp::KERNEL | Gfp::ZERO).to_string(),
            "GFP_KERNEL|__GFP_ZERO"
        );
        assert_eq!(
            (Gfp::HIGHUSER_MOVABLE | Gfp::ZERO).to_string(),
            "GFP_HIGHUSER_MOVABLE|__GFP_ZERO"
        );
        assert_eq!(Gfp::default().to_string(), "none");
        assert_eq!(Gfp(1 << 9).to_string(), "0x200");
        for g in [
            Gfp::TRANSHUGE,
            Gfp::ATOMIC | Gfp::NOWARN | Gfp::COMP,
            Gfp::NOWAIT,
            Gfp::USER | Gfp::THISNODE,
            Gfp(1 << 9) | Gfp::KERNEL,
        ] {
            assert_eq!(g.to_string().parse::<Gfp>(), Ok(g), "{g}");
        }
        assert!("GFP_KERNEL|__GFP_BOGUS".parse::<Gfp>().is_err());
        assert_eq!("__GFP_DMA".parse::<Gfp>(), Ok(Gfp::DMA));
        assert_eq!(
            "__GFP_DMA32|__GFP_NO_OBJ_EXT".parse::<Gfp>(),
            Ok(Gfp::DMA32 | Gfp::NO_OBJ_EXT)
        );
        assert_eq!(Gfp::from_bits(1 << 30), None);
    }

    #[test]
    fn alloc_flags_follow_gfp_to_alloc_flags() {
        let slow =
            |gfp, order| AllocFlags::slow(gfp, Order::new(order), HighatomicRules::HighAtomic);
        assert_eq!(slow(Gfp::KERNEL, 0).wmark, Some(Wmark::Min));
        assert!(!slow(Gfp::KERNEL, 0).non_block);
        let atomic = slow(Gfp::ATOMIC, 0);
        assert!(atomic.min_reserve && atomic.non_block);
        assert_eq!(slow(Gfp::KERNEL | Gfp::MEMALLOC, 0).wmark, None);
        let refused = slow(Gfp::KERNEL | Gfp::MEMALLOC | Gfp::NOMEMALLOC, 0);
        assert_eq!(refused.wmark, Some(Wmark::Min));
    }

    /// Only a high-order `GFP_ATOMIC`-shaped request gets the reserve; 6.3
    /// lets every non-blocking or `__GFP_HIGH` request count it in the
    /// watermark and fall back to it, 5.13 only `ALLOC_HARDER`.
    #[test]
    fn the_highatomic_flags_follow_each_era() {
        use HighatomicRules::{Harder, HighAtomic};
        let f = |gfp, order, rules| AllocFlags::slow(gfp, Order::new(order), rules);
        for rules in [Harder, HighAtomic] {
            assert!(f(Gfp::ATOMIC, 2, rules).highatomic, "{rules:?}");
            assert!(!f(Gfp::ATOMIC, 0, rules).highatomic, "order 0: {rules:?}");
            assert!(
                !f(Gfp::KERNEL, 2, rules).highatomic,
                "may reclaim: {rules:?}"
            );
            assert!(
                !f(Gfp::NOWAIT, 2, rules).highatomic,
                "no __GFP_HIGH: {rules:?}"
            );
            assert!(!f(Gfp::ATOMIC | Gfp::NOMEMALLOC, 2, rules).highatomic);
            assert!(!f(Gfp::KERNEL, 2, rules).reserves);
            assert!(f(Gfp::ATOMIC, 0, rules).reserves);
        }
        assert!(
            f(Gfp::NOWAIT, 0, HighAtomic).reserves
                && f(Gfp::NOWAIT, 0, HighAtomic).highatomic_fallback
        );
        assert!(
            !f(Gfp::NOWAIT, 0, Harder).reserves && !f(Gfp::NOWAIT, 0, Harder).highatomic_fallback
        );
        assert!(!f(Gfp::ATOMIC, 2, HighatomicRules::None).highatomic);
    }
}
