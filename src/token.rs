//! Token ids: [`Token`], the crate's own, and [`IntoToken`], the engine's.

/// A token id, as the engine's tokenizer numbers it.
///
/// Every strategy hashes ids the way llama.cpp hashes its `i32` tokens, so
/// engines with `i32` ids keep reference-exact drafts: through the
/// [`Stepper`](crate::step::Stepper), which takes `u32` ids, they convert
/// theirs at the [`Target`](crate::step::Target) boundary with
/// [`IntoToken`] (the same bits); the owned-history API
/// ([`Speculative::draft_next`](crate::Speculative::draft_next)) and
/// [`verify`](crate::verify) take and return `i32` ids as they are.
pub type Token = u32;

/// An engine's token id: [`Token`] (`u32`), `i32` (llama.cpp's
/// `llama_token`) and references to either. The owned-history API of
/// [`Speculative`](crate::Speculative)
/// ([`begin_owned`](crate::Speculative::begin_owned),
/// [`extend_history`](crate::Speculative::extend_history),
/// [`draft_next`](crate::Speculative::draft_next)) and [`verify`](crate::verify)
/// take and return the engine's own ids with it.
///
/// An `i32` id becomes the `u32` with the same bits, the value llama.cpp's
/// hashes see: drafts are those of the `&[u32]` API on the converted
/// stream, and [`from_token`](IntoToken::from_token) is the way back.
///
/// ```
/// use selfspec::IntoToken;
///
/// assert_eq!((-1i32).into_token(), u32::MAX);
/// assert_eq!(i32::from_token(u32::MAX), -1);
/// assert_eq!(7u32.into_token(), 7);
/// assert_eq!((&-2i32).into_token(), u32::MAX - 1);
/// ```
pub trait IntoToken: Copy {
    /// The id type itself (`u32` or `i32`; for a reference, the referenced type).
    type Id: IntoToken<Id = Self::Id> + PartialEq;

    /// The id as a [`Token`].
    fn into_token(self) -> Token;

    /// The engine's id for `token` (the inverse of
    /// [`into_token`](IntoToken::into_token)).
    fn from_token(token: Token) -> Self::Id;

    /// `draft` in the engine's ids: `draft` itself for `u32`, else written
    /// into `buffer` (reused: no allocation once it has grown).
    #[doc(hidden)]
    fn ids<'a>(draft: &'a [Token], buffer: &'a mut Vec<i32>) -> &'a [Self::Id];
}

impl IntoToken for Token {
    type Id = Token;

    #[inline]
    fn into_token(self) -> Token {
        self
    }
    #[inline]
    fn from_token(token: Token) -> Token {
        token
    }
    #[inline]
    fn ids<'a>(draft: &'a [Token], _: &'a mut Vec<i32>) -> &'a [Token] {
        draft
    }
}

impl IntoToken for i32 {
    type Id = i32;

    #[inline]
    fn into_token(self) -> Token {
        Token::from_ne_bytes(self.to_ne_bytes())
    }
    #[inline]
    fn from_token(token: Token) -> i32 {
        i32::from_ne_bytes(token.to_ne_bytes())
    }
    #[inline]
    fn ids<'a>(draft: &'a [Token], buffer: &'a mut Vec<i32>) -> &'a [i32] {
        buffer.clear();
        buffer.extend(draft.iter().map(|&t| i32::from_token(t)));
        buffer
    }
}

impl<T: IntoToken> IntoToken for &T {
    type Id = T::Id;

    #[inline]
    fn into_token(self) -> Token {
        (*self).into_token()
    }
    #[inline]
    fn from_token(token: Token) -> T::Id {
        T::from_token(token)
    }
    #[inline]
    fn ids<'a>(draft: &'a [Token], buffer: &'a mut Vec<i32>) -> &'a [T::Id] {
        T::ids(draft, buffer)
    }
}
