"""scikit-learn estimators over ``stabcli.measure.fourier``: random Fourier features and Procrustes alignment.

A module of their own so that the command line, which streams files through the same
functions, never pays for importing scikit-learn. Parameters are validated the
scikit-learn way (``_parameter_constraints``, checked by ``fit``); the one constraint
the declarations cannot state, an even ``n_components``, is an ``OptionError``. Every
error is a ``ValueError``.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data

from stabcli.errors import OptionError
from stabcli.measure.align import procrustes_rotation
from stabcli.measure.fourier import blocked_matmul, check_output_dim, draw_directions, fourier_features


class FourierFeaturizer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Random Fourier features approximating the Gaussian kernel ``exp(−σ²‖h − h'‖²/2)``.

    Parameters
    ----------
    n_components : int, default=128
        Output dimension M, an even integer >= 2; ``M/2`` random directions, each giving a
        cos and a sin. An odd M raises ``OptionError`` (a ``ValueError``) in ``fit``.
    sigma : float, default=1.0
        Standard deviation of the directions; the kernel bandwidth is ``1/σ``.
        Matches ``sklearn.kernel_approximation.RBFSampler`` with ``gamma = σ²/2``.
    normalize : bool, default=True
        L2-normalize rows before projecting (zero rows stay zero).
    random_state : int >= 0 or None, default=None
        Seed for ``numpy.random.default_rng``; the same seed gives the same directions.

    Attributes
    ----------
    directions_ : ndarray of shape (n_features_in_, n_components // 2)
        The random directions U.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).standard_normal((5, 3))
    >>> FourierFeaturizer(n_components=8, random_state=0).fit_transform(X).shape
    (5, 8)
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "n_components": [Interval(Integral, 1, None, closed="left")],  # and even: checked in fit
        "sigma": [Interval(Real, 0, None, closed="neither")],
        "normalize": ["boolean"],
        "random_state": [Interval(Integral, 0, None, closed="left"), None],
    }

    def __init__(
        self, *, n_components: int = 128, sigma: float = 1.0, normalize: bool = True, random_state: int | None = None
    ):
        self.n_components = n_components
        self.sigma = sigma
        self.normalize = normalize
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any = None) -> FourierFeaturizer:
        check_output_dim(self.n_components)
        X = validate_data(self, X, dtype=(np.float64, np.float32))
        self.directions_ = draw_directions(self.n_features_in_, self.n_components, self.sigma, self.random_state)
        self._n_features_out = self.n_components
        return self

    def transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=(np.float64, np.float32), reset=False)
        return fourier_features(X, self.directions_, self.normalize)


class ProcrustesAligner(TransformerMixin, BaseEstimator):
    """Orthogonal Procrustes alignment onto a reference with the same rows.

    ``fit(X)`` finds the rotation Q minimizing ``‖X Q − reference‖_F``
    (``scipy.linalg.orthogonal_procrustes``); ``transform(X)`` returns ``X Q``.

    Parameters
    ----------
    reference : array of shape (n_samples, n_features)
        Rows matched to the rows of X given to ``fit``.

    Attributes
    ----------
    rotation_ : ndarray of shape (n_features_in_, n_features_in_)
    n_features_in_ : int
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {"reference": ["array-like", None]}

    def __init__(self, *, reference: Any = None):
        self.reference = reference

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any = None) -> ProcrustesAligner:
        X = validate_data(self, X, dtype=(np.float64, np.float32))
        reference = np.asarray(self.reference, dtype=np.float64) if self.reference is not None else None
        if reference is None or reference.shape != X.shape:
            raise OptionError(
                "reference", f"must have the shape of X {X.shape}, got {None if reference is None else reference.shape}"
            )
        self.rotation_ = procrustes_rotation(X, reference)
        return self

    def transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=(np.float64, np.float32), reset=False)
        return blocked_matmul(np.asarray(X, dtype=np.float64), self.rotation_)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        check_is_fitted(self)
        return np.asarray([f"aligned{i}" for i in range(self.n_features_in_)], dtype=object)
