//! The cache of compiled signatures: least recently used first out,
//! bounded, inspectable and clearable.

use std::sync::Arc;
use xform_ops::{Aval, AxisName, Device, Tensor};

use crate::tree::{DynStatic, Skeleton, StaticValue};

/// Statistics of a jitted function's cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Calls that found their signature compiled.
    pub hits: u64,
    /// Calls that traced (a new signature, or one evicted or cleared).
    pub misses: u64,
    /// Entries dropped to keep the cache within its capacity.
    pub evictions: u64,
    /// Signatures held now.
    pub entries: usize,
    /// The most signatures held at once.
    pub capacity: usize,
}

/// What the cache shows of one compiled signature.
#[derive(Clone, Debug)]
pub struct JitEntry {
    /// The input leaves' shapes, dtypes and devices, in leaf order.
    pub avals: Vec<Aval>,
    /// The inputs' tree structure.
    pub skeleton: Skeleton,
    /// The static argument, as `Debug` prints it (`()` for plain `jit`).
    pub static_arg: String,
    /// The default device when it was traced (where tensors `f` creates
    /// are placed).
    pub default_device: Device,
    /// Equations of the program as staged.
    pub traced_eqns: usize,
    /// Equations after the passes.
    pub optimized_eqns: usize,
    /// Calls that found this entry.
    pub hits: u64,
    /// What the execution layer made of the program: its plan's steps,
    /// fused steps, sink steps, results written in place, CUDA graph status
    /// and batch split (`xform_exec::PlanStats`).
    pub plan: xform_exec::PlanStats,
}

/// One compiled signature: its key, and what the call needs.
pub(crate) struct Slot<S, C> {
    pub static_arg: S,
    /// The input tree's static values (`Tree::static_values`), owned.
    pub statics: Vec<Option<Box<dyn DynStatic>>>,
    pub skeleton: Skeleton,
    pub avals: Vec<Aval>,
    pub default_device: Device,
    /// The named axes in force when it was traced (NOTE: [named axes] in
    /// xform-ops: a collective's result shape is the axis's size).
    pub axes: Vec<(AxisName, usize)>,
    pub hits: u64,
    pub compiled: Arc<C>,
}

impl<S: PartialEq, C> Slot<S, C> {
    /// True if this slot's key is `(s, the tree's static values,
    /// skeleton, leaves' avals, default device)`: the avals are compared
    /// first, borrowed (no copy), the skeleton last.
    pub fn matches(&self, key: Key<'_, S>, leaves: &[Tensor], skeleton: &dyn Fn() -> Skeleton) -> bool {
        let Key { static_arg: s, statics, device, axes } = key;
        self.default_device == device
            && self.axes[..] == *axes
            && self.avals.len() == leaves.len()
            && self
                .avals
                .iter()
                .zip(leaves)
                .all(|(a, l)| l.with_aval(|b| a.dtype == b.dtype && a.device == b.device && a.shape == *b.shape))
            && self.static_arg == *s
            && self.statics.len() == statics.len()
            && statics.iter().zip(&self.statics).all(|(v, k)| v.matches_key(k))
            && self.skeleton == skeleton()
    }
}

/// What a call's key holds besides its leaves' avals and tree structure.
pub(crate) struct Key<'a, S> {
    pub static_arg: &'a S,
    pub statics: &'a [StaticValue<'a>],
    pub device: Device,
    /// The named axes in force, innermost first.
    pub axes: &'a [(AxisName, usize)],
}

impl<S> Clone for Key<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Key<'_, S> {}

/// The cache: most recently used last.
pub(crate) struct Cache<S, C> {
    pub slots: Vec<Slot<S, C>>,
    pub capacity: usize,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

impl<S: PartialEq, C> Cache<S, C> {
    pub fn new(capacity: usize) -> Self {
        Cache { slots: Vec::new(), capacity: capacity.max(1), hits: 0, misses: 0, evictions: 0 }
    }

    /// The compiled entry of a key, counted as a hit and made the most
    /// recently used; `None` (not counted) if absent.
    pub fn get(&mut self, key: Key<'_, S>, leaves: &[Tensor], skeleton: &dyn Fn() -> Skeleton) -> Option<Arc<C>> {
        // most recent first: a loop calling one signature finds it at once
        let i = self.slots.iter().rposition(|slot| slot.matches(key, leaves, skeleton))?;
        self.hits += 1;
        let last = self.slots.len() - 1;
        if i != last {
            let slot = self.slots.remove(i);
            self.slots.push(slot);
        }
        let slot = self.slots.last_mut().expect("just found");
        slot.hits += 1;
        Some(slot.compiled.clone())
    }

    /// Adds an entry (a miss was counted by the caller), evicting the
    /// least recently used beyond the capacity. A key already present
    /// (another thread compiled it meanwhile) is replaced.
    pub fn insert(&mut self, slot: Slot<S, C>, leaves: &[Tensor]) {
        let sk = slot.skeleton.clone();
        let statics: Vec<StaticValue<'_>> =
            slot.statics.iter().map(|k| k.as_deref().map_or(StaticValue::Opaque, StaticValue::Eq)).collect();
        let key =
            Key { static_arg: &slot.static_arg, statics: &statics, device: slot.default_device, axes: &slot.axes };
        if let Some(i) = self.slots.iter().position(|o| o.matches(key, leaves, &|| sk.clone())) {
            self.slots.remove(i);
        }
        self.slots.push(slot);
        self.shrink();
    }

    /// Evicts down to the capacity.
    pub fn shrink(&mut self) {
        while self.slots.len() > self.capacity {
            self.slots.remove(0);
            self.evictions += 1;
        }
    }

    pub fn stats(&self) -> JitStats {
        JitStats {
            hits: self.hits,
            misses: self.misses,
            evictions: self.evictions,
            entries: self.slots.len(),
            capacity: self.capacity,
        }
    }
}
