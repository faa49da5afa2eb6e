"""Every standard operation of the spec has a registered converter and an operand-table entry."""

from nnadapter_tvm.op_converters import supported_operations
from nnadapter_tvm.operations import schema_of
from nnadapter_tvm.types import STANDARD_OPERATIONS, OperationType


def test_standard_operation_count():
    assert len(STANDARD_OPERATIONS) == 93


def test_every_standard_operation_has_a_converter():
    missing = sorted(o.name for o in STANDARD_OPERATIONS - supported_operations())
    assert not missing, f"no converter for: {missing}"


def test_every_operation_has_an_operand_table_entry():
    assert not [o.name for o in OperationType if schema_of(o) is None]
