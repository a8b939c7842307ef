//! Memory hotplug through the allocator on every model the lab knows
//! (the userfaultfd ones too, with `--features uffd`): add → online with
//! each online type → allocate → offline refused while in use → free →
//! offline → remove; and the models that cannot refuse with the models
//! that can.

use buddy::{AllocError, Gfp, Kernel, MemHotplugError, OnlineType, Options};
use pfnlab::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model_options};
use sparsemem::{Geometry, Layout, MemRange, NodeId, Order, Pfn, RangeKind};
use vmemmap::VmemmapOptions;

const SECTION: u64 = 1 << 15;

fn layout(device: bool) -> Layout {
    let mut ranges = vec![
        MemRange::new(0, 256 << 20, RangeKind::Ram, 0),
        MemRange::new(512 << 20, 640 << 20, RangeKind::Hotplug, 1),
    ];
    if device {
        ranges.push(MemRange::new(
            1 << 30,
            (1 << 30) + (4 << 20),
            RangeKind::Device,
            1,
        ));
    }
    Layout::new(Geometry::X86_64, ranges, "hotplug").unwrap()
}

struct Lifecycle(OnlineType);

impl ModelVisitor for Lifecycle {
    type Output = ();
    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<(), AllocError> {
        let mut alloc = build_allocator::<M, Kernel>(layout, options, Options::default())?;
        let name = alloc.model().name();
        let start = Pfn::new((512 << 20) >> 12);
        assert!(alloc.model().pfn_to_online_page(start).is_none(), "{name}");
        let zid = alloc.online_pages(start, SECTION, self.0)?;
        assert_eq!(alloc.zone(zid).unwrap().node, NodeId::new(1), "{name}");
        let p = alloc.alloc_pages(
            Order::new(10),
            Gfp::HIGHUSER_MOVABLE.thisnode(),
            NodeId::new(1),
            None,
        )?;
        assert!(
            matches!(
                alloc.offline_pages(start, SECTION),
                Err(MemHotplugError::InUse { .. })
            ),
            "{name}: offline refused while in use"
        );
        alloc.free_pages(p, Order::new(10))?;
        alloc.offline_pages(start, SECTION)?;
        alloc.hot_remove(start, SECTION)?;
        assert!(!alloc.model().pfn_valid(start), "{name}");
        Ok(())
    }
}

#[test]
fn every_model_runs_the_hotplug_lifecycle_or_refuses_clearly() {
    for &kind in ModelKind::ALL {
        for device in [false, true] {
            let layout = layout(device);
            for t in OnlineType::ALL {
                let got = with_model_options(
                    kind,
                    &layout,
                    VmemmapOptions {
                        thp: false,
                        ..VmemmapOptions::default()
                    },
                    Lifecycle(t),
                );
                let holds = match kind {
                    ModelKind::Flat => false,
                    ModelKind::Sparse | ModelKind::SparseExtreme => !device,
                    _ => true,
                };
                match got {
                    Ok(()) => assert!(holds, "{kind} built a layout it cannot hold"),
                    Err(e) => {
                        let e = e.to_string();
                        assert!(!holds, "{kind} {t}: {e}");
                        assert!(
                            e.contains("cannot hold the range") && e.contains("models that can"),
                            "{e}"
                        );
                    }
                }
            }
        }
    }
}
