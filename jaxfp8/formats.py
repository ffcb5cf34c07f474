"""The format registry: every narrow float of ml_dtypes, its layout and values."""
from jaxfp8._src.numerics.formats import all_formats as all_formats
from jaxfp8._src.numerics.formats import all_names as all_names
from jaxfp8._src.numerics.formats import Format as Format
from jaxfp8._src.numerics.formats import FormatLike as FormatLike
from jaxfp8._src.numerics.formats import get as get
from jaxfp8._src.numerics.formats import get_narrow as get_narrow
from jaxfp8._src.numerics.formats import is_narrow as is_narrow
from jaxfp8._src.numerics.formats import names as names

__all__ = ["Format", "FormatLike", "all_formats", "all_names", "get",
           "get_narrow", "is_narrow", "names"]
