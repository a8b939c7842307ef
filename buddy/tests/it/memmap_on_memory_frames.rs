//! memmap_on_memory on real frames: a hot-added block's `struct page`s are
//! stored in the block's own first frames (one page of memory seen at two
//! addresses, as frames and as memmap), and removing the block leaves no
//! page of the frames mapped in the memmap.

use buddy::{Allocator, BuddyModel, Era, Kernel, MemmapOnMemory, OnlineType, Options};
use sparsemem::hvo::{HvoError, HvoLayout};
use sparsemem::{Geometry, Layout, MemRange, MemoryModel, NodeId, Page, Pfn, RangeKind, UserFlag};
use vmemmap::{Detector, Vmemmap, VmemmapTable};

const BLOCK: u64 = 1 << 15; // 128 MiB of 4 KiB pages
const GIB: u64 = 1 << 30;
const PAGE: u64 = 4096;
const DESC: u64 = 64;

/// 1 GiB of RAM and 1 GiB of hot-pluggable memory from 1 GiB.
fn layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(0, GIB, RangeKind::Ram, 0),
            MemRange::new(GIB, 2 * GIB, RangeKind::Hotplug, 0),
        ],
        "memmap_on_memory on frames",
    )
    .unwrap()
}

fn hot_start() -> Pfn {
    Pfn::new(GIB / PAGE)
}

/// A 6.18 allocator with real frames, the hot-pluggable range removed so
/// the test adds it.
fn allocator<D: Detector>() -> Allocator<Vmemmap<D>, Kernel> {
    let layout = layout();
    let model = Vmemmap::<D>::new(&layout).unwrap();
    let options = Options {
        frames: true,
        ..Options::for_era(Era::V6_18)
    };
    let mut alloc = Allocator::new(model, &layout, options).unwrap();
    alloc.hot_remove(hot_start(), 8 * BLOCK).unwrap();
    alloc
}

/// Hot-adds one block at `start` with its memmap in the block, and
/// onlines it.
fn add_and_online<M: BuddyModel>(alloc: &mut Allocator<M, Kernel>, start: Pfn) {
    alloc
        .hot_add_memmap_on_memory(start, BLOCK, NodeId::ZERO, MemmapOnMemory::On)
        .unwrap();
    alloc
        .online_pages(start, BLOCK, OnlineType::Online)
        .unwrap();
}

/// Where `pfn`'s descriptor is stored among the frames of its block, if
/// the block's memmap is on its frames: block start + offset / page size.
fn descriptor_in_frames<M: BuddyModel>(alloc: &Allocator<M, Kernel>, pfn: Pfn) -> *const u8 {
    let block = Pfn::new(pfn.get() / BLOCK * BLOCK);
    let offset = (pfn.get() - block.get()) * DESC;
    let frame = alloc.page_address(block + offset / PAGE).unwrap();
    frame.as_ptr().wrapping_add((offset % PAGE) as usize)
}

fn descriptor<M: BuddyModel<Page = Page>>(alloc: &Allocator<M, Kernel>, pfn: Pfn) -> *const u8 {
    std::ptr::from_ref(alloc.model().pfn_to_page(pfn).unwrap()).cast()
}

/// The 64 bytes at `p`.
fn bytes(p: *const u8) -> [u8; 64] {
    // SAFETY: the callers pass descriptors of present pfns, or the frames
    // holding them: 64 readable bytes each.
    unsafe { std::ptr::read_volatile(p.cast::<[u8; 64]>()) }
}

/// The memory block mappings of the frames' memfd that overlap `[lo, hi)`
/// in this process (`/proc/self/maps`).
fn frames_mapped_in(lo: u64, hi: u64) -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("pfnlab-frames"))
        .filter(|l| {
            let range = l.split(' ').next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            );
            a < hi && lo < b
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_memmap_lives_in_the_blocks_own_frames() {
    let mut alloc = allocator::<vmemmap::Table>();
    let start = hot_start();
    let lost = alloc
        .hot_add_memmap_on_memory(start, 2 * BLOCK, NodeId::ZERO, MemmapOnMemory::On)
        .unwrap();
    assert_eq!(lost, 512);
    assert_eq!(
        alloc.model().memmap_on_frames(),
        vec![start, start + BLOCK],
        "each block's memmap on its own frames"
    );
    // A self-hosted pfn, the first pfn the buddy gets, and one deep in the
    // second block: each descriptor is at a second address, in the frames
    // of its block's first pfns.
    let pfns = [start, start + 512, start + BLOCK + 20_000];
    for &pfn in &pfns {
        let (d, f) = (descriptor(&alloc, pfn), descriptor_in_frames(&alloc, pfn));
        assert_ne!(d, f, "two mappings");
        assert_eq!(bytes(d), bytes(f), "pfn {pfn:?}: the same bytes");
    }
    // Written through the memmap (the allocator's online writes zone,
    // flags and free lists), read in the frames.
    let before = bytes(descriptor_in_frames(&alloc, pfns[1]));
    alloc
        .online_pages(start, 2 * BLOCK, OnlineType::Online)
        .unwrap();
    for &pfn in &pfns {
        assert_eq!(
            bytes(descriptor(&alloc, pfn)),
            bytes(descriptor_in_frames(&alloc, pfn))
        );
    }
    assert_ne!(
        before,
        bytes(descriptor_in_frames(&alloc, pfns[1])),
        "online wrote the descriptor, and the frame shows it"
    );
    let page = alloc.model().pfn_to_page(pfns[2]).unwrap();
    page.set_user(UserFlag::Dirty);
    let flags = |p: *const u8| u64::from_ne_bytes(bytes(p)[..8].try_into().unwrap());
    assert_eq!(flags(descriptor_in_frames(&alloc, pfns[2])), page.flags());
    // Written in the frame, read through the memmap: PG_dirty cleared.
    let frame = descriptor_in_frames(&alloc, pfns[2])
        .cast_mut()
        .cast::<u64>();
    // SAFETY: the flags word of a free page's descriptor, which this test
    // alone touches; the frame is the memmap's own page.
    unsafe { frame.write_volatile(page.flags() & !(1 << 5)) };
    assert!(!page.test(sparsemem::PageFlag::Dirty));
}

#[test]
fn removal_leaves_no_memmap_on_the_frames() {
    let mut alloc = allocator::<vmemmap::Probe>();
    let start = hot_start();
    add_and_online(&mut alloc, start);
    let base = alloc.model().vmemmap_base() as u64;
    let (lo, hi) = (
        base + start.get() * DESC,
        base + (start.get() + BLOCK) * DESC,
    );
    assert_eq!(
        frames_mapped_in(lo, hi).len(),
        1,
        "the block's memmap is one mapping of the frames' memfd"
    );
    assert!(alloc.model().pfn_valid(start + 100), "the probe reads it");
    alloc.offline_pages(start, BLOCK).unwrap();
    alloc.hot_remove(start, BLOCK).unwrap();
    assert_eq!(frames_mapped_in(lo, hi), Vec::<String>::new());
    assert!(alloc.model().memmap_on_frames().is_empty());
    for pfn in [start, start + 100, start + BLOCK - 1] {
        assert!(!alloc.model().pfn_valid(pfn), "the probe faults: a hole");
    }
    // The frames are plain frames again, and the block can come back with
    // its memmap in boot memory.
    let frame = alloc.page_address(start).unwrap();
    assert!(bytes(frame.as_ptr()).iter().all(|&b| b == 0));
    alloc.hot_add(start, BLOCK, NodeId::ZERO).unwrap();
    alloc
        .online_pages(start, BLOCK, OnlineType::Online)
        .unwrap();
    assert!(alloc.model().pfn_valid(start + 100));
    assert!(
        bytes(alloc.page_address(start).unwrap().as_ptr())
            .iter()
            .all(|&b| b == 0)
    );
}

#[test]
fn without_frames_the_memmap_stays_in_the_reservation() {
    let layout = layout();
    let model = VmemmapTable::new(&layout).unwrap();
    let mut alloc =
        Allocator::<_, Kernel>::new(model, &layout, Options::for_era(Era::V6_18)).unwrap();
    alloc.hot_remove(hot_start(), 8 * BLOCK).unwrap();
    alloc
        .hot_add_memmap_on_memory(hot_start(), BLOCK, NodeId::ZERO, MemmapOnMemory::On)
        .unwrap();
    assert!(alloc.model().memmap_on_frames().is_empty());
    assert_eq!(alloc.page_address(hot_start()), None);
}

#[test]
fn hvo_refuses_a_folio_whose_memmap_is_self_hosted() {
    let layout = layout();
    let vmemmap_options = vmemmap::VmemmapOptions {
        memfd: true,
        ..Default::default()
    };
    let model = VmemmapTable::with_options(&layout, vmemmap_options).unwrap();
    let options = Options {
        frames: true,
        ..Options::for_era(Era::V6_18)
    };
    let mut alloc = Allocator::<_, Kernel>::new(model, &layout, options).unwrap();
    let start = hot_start();
    alloc.hot_remove(start, 8 * BLOCK).unwrap();
    add_and_online(&mut alloc, start);
    let (head, order) = (start + 512, 9);
    let hvo = alloc.model().hugetlb_vmemmap().unwrap();
    // SAFETY: refused before any remap (the check under test), so no
    // descriptor is touched; on a wrong answer the test fails either way.
    let refused = unsafe { hvo.optimize(&[head], order, HvoLayout::FakeHead, false) };
    assert!(
        matches!(refused, Err(HvoError::SelfHosted(p)) if p == head),
        "{refused:?}"
    );
    // The same folio in boot memory passes this check (the order is
    // optimisable here).
    assert!(hvo.hvo_supported(order).is_ok());
    // A memfd-backed memmap gets its own file's hole back at removal.
    alloc.offline_pages(start, BLOCK).unwrap();
    alloc.hot_remove(start, BLOCK).unwrap();
    let base = alloc.model().vmemmap_base() as u64;
    let (lo, hi) = (
        base + start.get() * DESC,
        base + (start.get() + BLOCK) * DESC,
    );
    assert_eq!(frames_mapped_in(lo, hi), Vec::<String>::new());
    assert!(!alloc.model().pfn_valid(start));
}

#[test]
fn a_layout_files_memmap_on_memory_range_is_on_its_frames_from_boot() {
    let toml = "[[range]]\nstart = 0\nend = 0x40000000\nkind = \"ram\"\n\
        [[range]]\nstart = 0x40000000\nend = 0x50000000\nkind = \"hotplug\"\n\
        memmap_on_memory = true\n";
    let layout = Layout::from_toml(toml).unwrap();
    let options = Options {
        frames: true,
        ..Options::for_era(Era::V6_18)
    };
    let model = VmemmapTable::new(&layout).unwrap();
    let mut alloc = Allocator::<_, Kernel>::new(model, &layout, options).unwrap();
    let start = hot_start();
    assert_eq!(alloc.model().memmap_on_frames(), vec![start, start + BLOCK]);
    alloc
        .online_pages(start, 2 * BLOCK, OnlineType::Online)
        .unwrap();
    let pfn = start + BLOCK + 777;
    assert_eq!(
        bytes(descriptor(&alloc, pfn)),
        bytes(descriptor_in_frames(&alloc, pfn))
    );
}
