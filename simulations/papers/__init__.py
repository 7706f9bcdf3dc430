"""Scripts of one paper each: experiments beyond the generic runner (python -m simulations.papers.<paper>.<script>)."""
