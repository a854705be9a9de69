//! Capturing a session's launches as a CUDA graph (or, in host emulation, a list of
//! ops), and replaying it.

use super::*;

impl CudaSession {
    pub(super) fn launch_graph(&self, graph: &Graph) -> Result<()> {
        match graph {
            Graph::Cuda(g) => g.0.launch().map_err(driver("cuGraphLaunch")),
            Graph::Host(ops) => match &self.stream {
                Stream::Host(d) => ops::replay(d.as_ref(), ops),
                Stream::Cuda(_) => unreachable!("host graphs are captured on host streams"),
            },
        }
    }

    /// Captures what `body` queues on the stream as a graph (on a host stream, records it).
    pub(super) fn capture_with(&self, body: impl FnOnce(&Dev<'_>) -> Result<()>) -> Result<Graph> {
        match &self.stream {
            Stream::Cuda(s) => {
                use cudarc::driver::sys;
                let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
                s.begin_capture(mode)
                    .map_err(driver("cuStreamBeginCapture"))?;
                let body = body(&self.dev());
                // Capture ends whatever the body did, or the stream stays unusable.
                let flags = sys::CUgraphInstantiate_flags(0);
                let graph = s.end_capture(flags).map_err(driver("cuStreamEndCapture"));
                body?;
                let graph = graph?.ok_or_else(|| CudaError::Library {
                    op: "cuStreamEndCapture",
                    msg: "the capture recorded no graph".into(),
                })?;
                Ok(Graph::Cuda(SendGraph(graph)))
            }
            Stream::Host(_) => {
                let rec = RefCell::new(Vec::new());
                let dev = Dev {
                    record: Some(&rec),
                    ..self.dev()
                };
                body(&dev)?;
                Ok(Graph::Host(rec.into_inner()))
            }
        }
    }
}
