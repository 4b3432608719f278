"""`gradstream.Size`: the shape of a tensor, a tuple as in PyTorch."""


class Size(tuple):
    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __getitem__(self, item):
        r = super().__getitem__(item)
        return Size(r) if isinstance(item, slice) else r

    def __add__(self, other):
        return Size(tuple(self) + tuple(other))

    def __repr__(self) -> str:
        return f"gradstream.Size({list(self)})"
