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

/// `inner`, calling `done` with the number of data bytes it sent once the body is dropped
/// (finished, or its client gone): how the request metrics learn the size of an answer whose
/// length was not known when it started.
pub(crate) fn counted(inner: Body, done: impl FnOnce(u64) + Send + Sync + 'static) -> Body {
    Counted {
        inner,
        sent: 0,
        done: Some(Box::new(done)),
    }
    .boxed()
}

type Done = Box<dyn FnOnce(u64) + Send + Sync>;

struct Counted {
    inner: Body,
    sent: u64,
    done: Option<Done>,
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.sent += data.len() as u64;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(self.sent);
        }
    }
}
