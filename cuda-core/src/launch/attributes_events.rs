//! The launch attributes that name an event: the programmatic event and the launch-completion
//! event. The configuration borrows the [`Event`], so the handle the driver is given is live
//! for the call; the driver records it at the launch, and an event destroyed while that record
//! is pending is released by the driver when it completes, so nothing needs to live longer.
//!
//! Both are stream launches only (`cuLaunchKernelEx`): a graph expresses them as programmatic
//! edges, so [`LaunchConfig::check`] (what graph kernel nodes and executable-graph setters use)
//! refuses a configuration with one, rather than drop it.

#![forbid(unsafe_code)]

use super::{AttributeWriter, LaunchConfig};
use crate::error::{Error, Result};
use crate::event::{Event, EventFlags};
use crate::stream::Stream;
use cuhost_driver_sys as sys;

/// An event a launch records that completes once every block of the kernel has triggered it
/// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`, compute capability 9.0): a block triggers with
/// `cudaTriggerProgrammaticLaunchCompletion()` (PTX `griddepcontrol.launch_dependents`), or at
/// its start when `trigger_at_block_start` is set. Work that waits on the event through the
/// programmatic dependency (`cudaGridDependencySynchronize()`, PTX `griddepcontrol.wait`) may
/// start before the kernel ends.
///
/// The event must be of the launch stream's context, created with
/// [`EventFlags::DISABLE_TIMING`] and not [`EventFlags::INTERPROCESS`]; otherwise the launch is
/// an [`Error::InvalidArgument`].
#[derive(Clone, Copy, Debug)]
pub struct ProgrammaticEvent<'a> {
    /// The event the launch records.
    pub event: &'a Event,
    /// Trigger the event as each block starts, rather than when the block asks.
    pub trigger_at_block_start: bool,
}

impl PartialEq for ProgrammaticEvent<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.event.as_raw() == other.event.as_raw()
            && self.trigger_at_block_start == other.trigger_at_block_start
    }
}

impl Eq for ProgrammaticEvent<'_> {}

impl std::hash::Hash for ProgrammaticEvent<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.event.as_raw() as usize, self.trigger_at_block_start).hash(state);
    }
}

impl<'a> LaunchConfig<'a> {
    /// Records `event` when every block has triggered it, or as each block starts with
    /// `trigger_at_block_start` (see [`ProgrammaticEvent`]).
    pub fn programmatic_event<'e>(self, event: &'e Event, trigger_at_block_start: bool) -> LaunchConfig<'e>
    where
        'a: 'e,
    {
        LaunchConfig { programmatic_event: Some(ProgrammaticEvent { event, trigger_at_block_start }), ..self }
    }

    /// Records `event` once every block of the kernel has begun
    /// (`CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`, CUDA 12.3; any compute capability): the
    /// event completes while the kernel may still run. The driver calls this best effort: it
    /// may complete only when the kernel does. The event must be as for
    /// [`ProgrammaticEvent`].
    pub fn launch_completion_event<'e>(self, event: &'e Event) -> LaunchConfig<'e>
    where
        'a: 'e,
    {
        LaunchConfig { launch_completion_event: Some(event), ..self }
    }

    /// Whether a launch-only attribute (an event) is set.
    #[inline]
    pub(super) fn has_events(&self) -> bool {
        self.programmatic_event.is_some() || self.launch_completion_event.is_some()
    }

    /// Refuses events a launch on `stream` cannot record: of another context, with timing, or
    /// shared with other processes.
    pub(super) fn check_events(&self, operation: &'static str, stream: &Stream) -> Result<()> {
        let programmatic = self.programmatic_event.map(|p| ("programmatic event", p.event));
        let completion = self.launch_completion_event.map(|e| ("launch-completion event", e));
        for (what, event) in programmatic.into_iter().chain(completion) {
            if event.context() != stream.context() {
                return Err(Error::refused(
                    crate::error::Reason::WRONG_CONTEXT,
                    operation,
                    format!(
                        "the {what} belongs to another context than the launch stream; create it in the stream's context"
                    ),
                ));
            }
            if !event.flags().contains(EventFlags::DISABLE_TIMING) {
                return Err(Error::invalid(
                    operation,
                    format!("the {what} records timing; create it with EventFlags::DISABLE_TIMING"),
                ));
            }
            if event.flags().contains(EventFlags::INTERPROCESS) {
                return Err(Error::invalid(
                    operation,
                    format!(
                        "the {what} is an INTERPROCESS event, which a launch cannot record; use an event of this process"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Writes the event attributes. Only the launch path calls this, after
    /// [`check_events`](Self::check_events), while `self` (and so each event) is borrowed.
    pub(super) fn push_events(&self, out: &mut AttributeWriter<'_>) {
        use sys::CUlaunchAttributeID as Id;
        if let Some(p) = self.programmatic_event {
            out.push(
                Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT,
                sys::CUlaunchAttributeValue {
                    programmaticEvent: sys::CUlaunchAttributeValue_union__bindgen_ty_2 {
                        event: p.event.as_raw(),
                        flags: 0,
                        triggerAtBlockStart: i32::from(p.trigger_at_block_start),
                        ..Default::default()
                    },
                },
            );
        }
        if let Some(event) = self.launch_completion_event {
            out.push(
                Id::CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
                sys::CUlaunchAttributeValue {
                    launchCompletionEvent: sys::CUlaunchAttributeValue_union__bindgen_ty_3 {
                        event: event.as_raw(),
                        flags: 0,
                        ..Default::default()
                    },
                },
            );
        }
    }
}

/// The refusal [`LaunchConfig::check`] gives outside a stream launch.
#[cold]
pub(super) fn events_outside_a_launch(operation: &'static str) -> Error {
    Error::invalid(
        operation,
        "programmatic and launch-completion events are recorded by stream launches only (Function::launch, Kernel::launch); in a graph, express the dependency as an edge",
    )
}
