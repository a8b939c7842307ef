//! Page migration: owners of movable pages, and `migrate_pages`.
//!
//! In the kernel a movable page is held by something that can be
//! repointed: a page table entry of an anonymous page, a page-cache slot of
//! a file page. `migrate_pages` (mm/migrate.c) takes a list of isolated
//! pages and a callback that gives it a target for each (`get_new_folio`:
//! `compaction_alloc` for compaction, `alloc_migration_target` elsewhere),
//! copies each page into its target, repoints every holder and frees the
//! source; a page it cannot move stays with its holder and counts as
//! failed. `/proc/vmstat` counts the outcome in base pages
//! (`pgmigrate_success`, `pgmigrate_fail`, Linux 3.8 on).
//!
//! What pfnlab models:
//! - [`Owners`]: the holders. An owner id resolves to the block it holds
//!   (`(pfn, order)`), and a reverse map answers "who holds this pfn" for
//!   the migrate scanner. The table lives beside the allocator, not in it:
//!   an allocator whose caller keeps no owners pays nothing on its hot
//!   path. An owner is the caller's word that the block is movable: `own`
//!   takes the mask the block was allocated with and refuses one whose
//!   `gfp_migratetype` is not `MIGRATE_MOVABLE`, but cannot check the mask
//!   against the allocation (a movable page may sit in a pageblock of
//!   another type after a fallback, so the pageblock cannot tell either).
//! - [`Owners::pin`]: the stand-in for a raised reference count (a GUP pin,
//!   a transient `get_page`), which `folio_expected_refs` finds in
//!   `__migrate_folio` and which makes the move fail with `-EAGAIN` until
//!   the retries run out.
//! - [`migrate_pages`]: per source, in order: a page without an owner is
//!   *not movable* (a page that is neither on the LRU nor a movable_ops
//!   page); a page in a `MIGRATE_HIGHATOMIC` pageblock is refused as not
//!   movable too, a guard of pfnlab's own (the kernel decides movability
//!   per folio, and its `migrate_pages` never reads the pageblock's
//!   migratetype), which keeps the atomic reserve where it is; a pinned
//!   page fails; an
//!   owner whose block is no longer allocated at its order (freed while
//!   owned) is stale and fails before anything is asked, copied or freed; a
//!   target callback that gives nothing ends the call (`-ENOMEM`), the
//!   sources not yet tried staying on the list uncounted, as the kernel
//!   leaves them; a target the migration may not take (the source or a
//!   block overlapping it, a block another owner holds, a block not handed
//!   out at the source's order) goes back through `put_new`, counts as
//!   a bad target and ends the call; otherwise the frame's bytes are copied where the
//!   allocator has real frames (`folio_mc_copy`), the source is freed and
//!   the owner is repointed (`remove_migration_ptes`).
//!
//! What it leaves out: the retry passes (10 before 6.3, the batched
//! unmap/move passes of `5dfab109d519` after), since nothing in the model
//! becomes movable between passes; splitting large folios on `-ENOMEM`;
//! hugetlb folios; writeback, dirty pages and mapping callbacks.

use std::collections::HashMap;

use sparsemem::{BuddyPage, Migratetype, Order, PageFlag, PageLayout, Pfn};

use crate::alloc::Allocator;
use crate::error::FreeError;
use crate::gfp::Gfp;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;

/// One holder in an [`Owners`] table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(u32);

/// Why a block cannot be owned, pinned or given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerError {
    /// The mask's migratetype is not `MIGRATE_MOVABLE`.
    NotMovable(Gfp),
    /// `pfn` does not head a block the allocator handed out at the order
    /// given.
    NotAllocated(Pfn),
    /// `pfn` already has an owner.
    AlreadyOwned(Pfn),
    /// No owner has this id (given up, or never made).
    NoOwner(OwnerId),
    /// `unpin` of an owner with no pin.
    NotPinned(OwnerId),
}

impl std::fmt::Display for OwnerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnerError::NotMovable(gfp) => write!(f, "{gfp} is not a movable allocation"),
            OwnerError::NotAllocated(pfn) => write!(f, "{pfn} heads no allocated block"),
            OwnerError::AlreadyOwned(pfn) => write!(f, "{pfn} already has an owner"),
            OwnerError::NoOwner(id) => write!(f, "no owner {}", id.0),
            OwnerError::NotPinned(id) => write!(f, "owner {} holds no pin", id.0),
        }
    }
}

impl std::error::Error for OwnerError {}

/// What an owner holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Owned {
    pfn: Pfn,
    order: Order,
    pins: u32,
}

/// Owners of movable blocks: owner id → `(pfn, order)`, and the reverse
/// map pfn → owner the migrate scanner asks.
///
/// Invariants:
/// - `by_pfn[p] == id` iff `slots[id]` is `Some` with pfn `p`;
/// - every owned block was allocated at its order when owned, and only
///   [`migrate_pages`] moves it (to a block it allocated).
///
/// A block an owner holds is held through the table from [`Owners::own`]
/// to [`Owners::disown`]: it is freed only after `disown`. A block freed
/// while still owned leaves a stale owner; [`migrate_pages`] checks each
/// owner's block again before it touches it and refuses one that is no
/// longer allocated at its order ([`MigrateFail::Stale`]). A frame an owner
/// holds is the owner's: whoever writes it through
/// [`Allocator::page_address`] must not run beside a [`migrate_pages`] of
/// the same table (which takes it `&mut`), and must look the address up
/// again after one, as a kernel user of a page re-reads its page table
/// entry after a migration.
#[derive(Clone, Debug, Default)]
pub struct Owners {
    slots: Vec<Option<Owned>>,
    unused: Vec<u32>,
    by_pfn: HashMap<u64, u32>,
}

impl Owners {
    /// An empty table.
    pub fn new() -> Owners {
        Owners::default()
    }

    /// Makes an owner for the allocated block `(pfn, order)`, allocated
    /// with `gfp`, which must be a movable mask.
    ///
    /// `pfn` must head a block the allocator handed out at exactly `order`
    /// (aligned, in a zone, not `PG_reserved`, one reference, `order` in
    /// `private`), else [`OwnerError::NotAllocated`].
    pub fn own<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        pfn: Pfn,
        order: Order,
        gfp: Gfp,
    ) -> Result<OwnerId, OwnerError> {
        if gfp.gfp_migratetype().ok() != Some(Migratetype::Movable) {
            return Err(OwnerError::NotMovable(gfp));
        }
        if self.by_pfn.contains_key(&pfn.get()) {
            return Err(OwnerError::AlreadyOwned(pfn));
        }
        if !is_allocated_head(alloc, pfn, order) {
            return Err(OwnerError::NotAllocated(pfn));
        }
        let owned = Some(Owned {
            pfn,
            order,
            pins: 0,
        });
        let id = match self.unused.pop() {
            Some(id) => {
                self.slots[id as usize] = owned;
                id
            }
            None => {
                self.slots.push(owned);
                (self.slots.len() - 1) as u32
            }
        };
        self.by_pfn.insert(pfn.get(), id);
        Ok(OwnerId(id))
    }

    fn slot(&mut self, id: OwnerId) -> Result<&mut Owned, OwnerError> {
        self.slots
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(OwnerError::NoOwner(id))
    }

    /// Gives the block up: the owner is gone and the caller holds
    /// `(pfn, order)` again (to free it, say). A pinned owner can be given
    /// up; its pins go with it.
    pub fn disown(&mut self, id: OwnerId) -> Result<(Pfn, Order), OwnerError> {
        let owned = *self.slot(id)?;
        self.slots[id.0 as usize] = None;
        self.unused.push(id.0);
        self.by_pfn.remove(&owned.pfn.get());
        Ok((owned.pfn, owned.order))
    }

    /// The block `id` holds.
    pub fn resolve(&self, id: OwnerId) -> Option<(Pfn, Order)> {
        let owned = self.slots.get(id.0 as usize)?.as_ref()?;
        Some((owned.pfn, owned.order))
    }

    /// The owner holding the block headed by `pfn` (the reverse map).
    pub fn owner_of(&self, pfn: Pfn) -> Option<OwnerId> {
        self.by_pfn.get(&pfn.get()).map(|&id| OwnerId(id))
    }

    /// The order of the owned block headed by `pfn`.
    pub fn owned_order(&self, pfn: Pfn) -> Option<Order> {
        self.resolve(self.owner_of(pfn)?).map(|(_, order)| order)
    }

    /// Raises the block's reference count: a pinned block cannot move.
    pub fn pin(&mut self, id: OwnerId) -> Result<(), OwnerError> {
        self.slot(id)?.pins += 1;
        Ok(())
    }

    /// Drops one pin.
    pub fn unpin(&mut self, id: OwnerId) -> Result<(), OwnerError> {
        let owned = self.slot(id)?;
        owned.pins = owned.pins.checked_sub(1).ok_or(OwnerError::NotPinned(id))?;
        Ok(())
    }

    /// Whether `id` holds a pin.
    pub fn is_pinned(&self, id: OwnerId) -> bool {
        self.slots
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .is_some_and(|o| o.pins > 0)
    }

    /// Every owner and the block it holds, by id.
    pub fn iter(&self) -> impl Iterator<Item = (OwnerId, Pfn, Order)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|o| (OwnerId(i as u32), o.pfn, o.order)))
    }

    /// Owners in the table.
    pub fn len(&self) -> usize {
        self.by_pfn.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.by_pfn.is_empty()
    }

    /// Repoints `id` from `from` to `to` (`remove_migration_ptes`).
    fn repoint(&mut self, id: OwnerId, from: Pfn, to: Pfn) {
        self.by_pfn.remove(&from.get());
        self.by_pfn.insert(to.get(), id.0);
        if let Ok(owned) = self.slot(id) {
            owned.pfn = to;
        }
        debug_assert_eq!(self.owner_of(to), Some(id));
    }
}

/// Why one page did not move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateFail {
    /// No owner (neither an LRU nor a movable_ops page), or, by pfnlab's
    /// own guard, not the kernel's, a `MIGRATE_HIGHATOMIC` pageblock.
    NotMovable,
    /// A pin (an extra reference `folio_expected_refs` does not expect).
    Pinned,
    /// The owner's block is no longer allocated at its order (freed while
    /// owned): nothing is copied or freed, the stale owner stays.
    Stale,
    /// The target callback gave nothing (`-ENOMEM`).
    NoTarget,
    /// The target callback gave a block the migration may not take: the
    /// source itself or one overlapping it, a block another owner holds,
    /// a block of another order, or no block the allocator handed out.
    BadTarget,
}

/// What migration did, in `/proc/vmstat`'s terms (base pages), with the
/// failures split by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MigrateCounts {
    /// `pgmigrate_success`.
    pub pgmigrate_success: u64,
    /// `pgmigrate_fail`: the sum of the reasons except `not_movable`.
    pub pgmigrate_fail: u64,
    /// Pages refused as not movable. Not in `pgmigrate_fail`: the kernel's
    /// isolation never hands `migrate_pages` a page that is neither on the
    /// LRU nor a movable_ops page, so `/proc/vmstat` never counts one.
    pub not_movable: u64,
    /// Pages failed as pinned.
    pub pinned: u64,
    /// Pages failed because their owner's block was freed while owned.
    pub stale: u64,
    /// Pages failed for want of a target.
    pub no_target: u64,
    /// Pages failed because the target given was refused.
    pub bad_target: u64,
}

impl MigrateCounts {
    fn fail(&mut self, why: MigrateFail, nr_pages: u64) {
        if why != MigrateFail::NotMovable {
            self.pgmigrate_fail += nr_pages;
        }
        match why {
            MigrateFail::NotMovable => self.not_movable += nr_pages,
            MigrateFail::Pinned => self.pinned += nr_pages,
            MigrateFail::Stale => self.stale += nr_pages,
            MigrateFail::NoTarget => self.no_target += nr_pages,
            MigrateFail::BadTarget => self.bad_target += nr_pages,
        }
    }
}

impl std::ops::AddAssign for MigrateCounts {
    fn add_assign(&mut self, o: MigrateCounts) {
        self.pgmigrate_success += o.pgmigrate_success;
        self.pgmigrate_fail += o.pgmigrate_fail;
        self.not_movable += o.not_movable;
        self.pinned += o.pinned;
        self.stale += o.stale;
        self.no_target += o.no_target;
        self.bad_target += o.bad_target;
    }
}

/// Why [`migrate_pages`] stopped before its list was done.
#[derive(Debug)]
pub enum MigrateError {
    /// The target callback gave nothing (`-ENOMEM`).
    NoTarget,
    /// A source could not be freed after its copy (freed behind its
    /// owner's back, or owned with another order): the target went back
    /// through `put_new`, the owner still holds the source.
    SourceFree(FreeError),
    /// A target the callback gave was refused ([`MigrateFail::BadTarget`]):
    /// it went back through `put_new`, the owner still holds the source.
    BadTarget(Pfn),
}

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MigrateError::NoTarget => write!(f, "no target page for migration"),
            MigrateError::SourceFree(e) => write!(f, "freeing a migrated source: {e}"),
            MigrateError::BadTarget(pfn) => write!(f, "target {pfn} refused for migration"),
        }
    }
}

impl std::error::Error for MigrateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MigrateError::SourceFree(e) => Some(e),
            _ => None,
        }
    }
}

/// Whether `pfn` heads a block `alloc` handed out at `order`: a managed
/// page of an allocator zone, not `PG_reserved`, aligned to `order`, not a
/// compound tail, on no free or per-CPU list, with one reference and
/// `order` in `private` (what a free of `(pfn, order)` would claim).
fn is_allocated_head<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    pfn: Pfn,
    order: Order,
) -> bool {
    if !pfn.get().is_multiple_of(order.nr_pages()) {
        return false;
    }
    let Some(page) = alloc.model().pfn_to_page(pfn) else {
        return false;
    };
    let in_zone = alloc
        .zones
        .get(ZoneId::new(page.zone_id()).index())
        .is_some_and(|z| z.spans(pfn));
    in_zone
        && !page.test(PageFlag::Reserved)
        && !page.test(PageFlag::Buddy)
        && !page.test(PageFlag::Pcp)
        && page.compound_head().is_none()
        && page.refcount() == 1
        && page.private() == u64::from(order.get())
}

/// Whether `pfn` can move at all, and with which owner.
fn source_owner<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    owners: &Owners,
    pfn: Pfn,
) -> Result<(OwnerId, Order), MigrateFail> {
    let id = owners.owner_of(pfn).ok_or(MigrateFail::NotMovable)?;
    // pfnlab's guard for the atomic reserve; the kernel has no such test.
    if alloc.model().get_pfnblock_migratetype(pfn) == Migratetype::HighAtomic {
        return Err(MigrateFail::NotMovable);
    }
    if owners.is_pinned(id) {
        return Err(MigrateFail::Pinned);
    }
    let (_, order) = owners.resolve(id).ok_or(MigrateFail::NotMovable)?;
    if !is_allocated_head(alloc, pfn, order) {
        return Err(MigrateFail::Stale);
    }
    Ok((id, order))
}

/// Whether the target `get_new` gave for the `order` block at `src` is one
/// the migration may take: a block the allocator handed out at `order`
/// (not reserved, aligned, a head), held by no owner, and disjoint from
/// `src` (so not `src` itself).
fn target_ok<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    owners: &Owners,
    src: Pfn,
    dst: Pfn,
    order: Order,
) -> bool {
    let nr = order.nr_pages();
    let disjoint = src.get() + nr <= dst.get() || dst.get() + nr <= src.get();
    disjoint && owners.owner_of(dst).is_none() && is_allocated_head(alloc, dst, order)
}

/// `migrate_pages(from, get_new_folio, put_new_folio, ...)`: moves each
/// page of `from` into a target `get_new(src, order)` allocates, copies
/// its frame (with real frames), repoints its owner and frees the source.
/// Pages that did not move are left in `from`, in order, for the caller to
/// put back (`putback_movable_pages`); `counts` gains what happened, in
/// base pages. Returns the number of pages left in `from` (the kernel's
/// "folios not migrated"), or why it stopped: on `-ENOMEM`
/// ([`MigrateError::NoTarget`]) the failing page is counted and the pages
/// not yet tried are left uncounted.
pub fn migrate_pages<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    owners: &mut Owners,
    from: &mut Vec<Pfn>,
    mut get_new: impl FnMut(Pfn, Order) -> Option<Pfn>,
    mut put_new: impl FnMut(Pfn),
    counts: &mut MigrateCounts,
) -> Result<usize, MigrateError> {
    let mut left = Vec::new();
    let mut pending = std::mem::take(from).into_iter();
    let mut stop = None;
    for src in pending.by_ref() {
        let (id, order) = match source_owner(alloc, owners, src) {
            Ok(found) => found,
            Err(why) => {
                // An owned block fails whole; a page without an owner is
                // one page.
                let nr = owners.owned_order(src).map_or(1, Order::nr_pages);
                counts.fail(why, nr);
                left.push(src);
                continue;
            }
        };
        let Some(dst) = get_new(src, order) else {
            counts.fail(MigrateFail::NoTarget, order.nr_pages());
            left.push(src);
            stop = Some(MigrateError::NoTarget);
            break;
        };
        if !target_ok(alloc, owners, src, dst, order) {
            put_new(dst);
            counts.fail(MigrateFail::BadTarget, order.nr_pages());
            left.push(src);
            stop = Some(MigrateError::BadTarget(dst));
            break;
        }
        if let Some(frames) = &alloc.frames {
            // `src` and `dst` were both checked just now as blocks handed
            // out at `order`, disjoint, `src` held through `owners` (taken
            // `&mut`), `dst` held by no owner: `copy_block`'s contract.
            frames.copy_block(src, dst, order.nr_pages());
        }
        if let Err(e) = alloc.free_pages(src, order) {
            // The source was not the owner's block of that order: the
            // target goes back and the owner stays.
            put_new(dst);
            left.push(src);
            stop = Some(MigrateError::SourceFree(e));
            break;
        }
        owners.repoint(id, src, dst);
        counts.pgmigrate_success += order.nr_pages();
    }
    left.extend(pending);
    *from = left;
    match stop {
        Some(e) => Err(e),
        None => Ok(from.len()),
    }
}

/// `alloc_migration_target`: a target for a move outside compaction, from
/// the allocator's zone path on `node` with `gfp` (a movable mask).
pub fn alloc_migration_target<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: sparsemem::NodeId,
    gfp: Gfp,
) -> impl FnMut(Pfn, Order) -> Option<Pfn> + '_ {
    move |_, order| alloc.alloc_pages(order, gfp, node, None).ok()
}
