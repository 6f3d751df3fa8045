//! A response body that carries a value until the body is dropped: how the request metrics and
//! the audit log learn when a long-running response (a watch) has ended.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use crate::respond::Body;

/// `inner`, holding `guard` until the body is dropped (finished, or its client gone).
pub(crate) fn with_guard<G: Send + Sync + Unpin + 'static>(inner: Body, guard: G) -> Body {
    Guarded {
        inner,
        _guard: guard,
    }
    .boxed()
}

struct Guarded<G> {
    inner: Body,
    _guard: G,
}

impl<G: Unpin> HttpBody for Guarded<G> {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
